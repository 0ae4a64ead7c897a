"""A preload that makes one os.fork() fail with EAGAIN, as a fork at RLIMIT_NPROC does.

FORK_TEST_FAIL_FORK says which: "server" (the server's fork of the middle process) or "middle"
(the middle process's fork of the trial). Only the first such fork fails: the file named by
FORK_TEST_FAIL_MARKER records that it did (a file, since the middle process is a new one each
time)."""

import errno
import os

_real_fork = os.fork
_server = os.getpid()


def _fork():
    where = "server" if os.getpid() == _server else "middle"
    marker = os.environ.get("FORK_TEST_FAIL_MARKER", "")
    if os.environ.get("FORK_TEST_FAIL_FORK") == where and marker:
        try:
            os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError:
            pass
        else:
            raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN))
    return _real_fork()


os.fork = _fork
