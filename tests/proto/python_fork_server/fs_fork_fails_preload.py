"""A preload that makes one fork fail, as a fork at RLIMIT_NPROC does (EAGAIN), or as a clone
refused by a seccomp filter does (FORK_TEST_FAIL_ERRNO=EINVAL, say).

FORK_TEST_FAIL_FORK says which: "server" (the server's fork: its clone of the trial, or its
os.fork() of the middle process when it forks twice) or "middle" (the middle process's fork of
the trial). Only the first such fork fails: the file named by FORK_TEST_FAIL_MARKER records that
it did (a file, since the middle process is a new one each time)."""

import errno
import os

from triald import _clone

_real_fork = os.fork
_real_clone = _clone.CloneParent.__call__
_server = os.getpid()


def _fail(error):
    where = "server" if os.getpid() == _server else "middle"
    marker = os.environ.get("FORK_TEST_FAIL_MARKER", "")
    if os.environ.get("FORK_TEST_FAIL_FORK") == where and marker:
        try:
            os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError:
            return
        raise OSError(error, os.strerror(error))


def _fork():
    _fail(errno.EAGAIN)
    return _real_fork()


def _clone_parent(self):
    _fail(getattr(errno, os.environ.get("FORK_TEST_FAIL_ERRNO", "EAGAIN")))
    return _real_clone(self)


os.fork = _fork
_clone.CloneParent.__call__ = _clone_parent
