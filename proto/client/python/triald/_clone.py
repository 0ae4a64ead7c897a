"""One fork whose child is the caller's parent's child: clone(CLONE_PARENT) for the fork server.

A fork server is the daemon's child; a trial must be the daemon's child too (its one reaper
waits for it). os.fork() cannot give a child to another process, so the server used to fork a
middle process that forked the trial and exited (the trial, orphaned, went to the daemon, a
child subreaper): two copies of the server's page tables, and the middle process's teardown,
on every start. clone(2) with CLONE_PARENT makes the trial the daemon's child in one copy.

os.fork() is glibc's fork() between CPython's PyOS_BeforeFork() and PyOS_AfterFork_Child();
CloneParent is the same with the raw clone system call in the middle, plus the two things of
glibc's own child set-up that a process that goes on running needs:

- the thread's id in glibc's thread descriptor (pthread_self()): the kernel writes the child's
  id there (CLONE_CHILD_SETTID at that field, found through `_thread_db_pthread_tid`, the
  descriptor glibc exports for its own libthread_db), so mutex ownership, pthread_kill and
  pthread_setaffinity_np of the main thread name the child, not the server;
- the robust-futex list, which the kernel does not copy: registered again at the address the
  server registered (get_robust_list), empty (the server holds no robust mutex: checked before
  each clone).

What it does not run is the C libraries' pthread_atfork handlers. They exist to repair what
other threads held at the fork (allocator arenas, thread pools); the server forks only with one
thread and CUDA not initialised (the safety check), so there is nothing for them to repair.
CPython's own at-fork work (its locks, the threading module, `random`'s reseed, the handlers of
os.register_at_fork) runs as in os.fork().

Used on x86_64 and aarch64 with glibc; `CloneParent.probe()` says why not elsewhere, and the
server double-forks there.

collapse_to_huge_pages() makes every fork of the server cheaper, once or twice: its private
anonymous memory (the C heap, the interpreter's arenas: about 100 MiB after `import torch`) in
huge pages, so a fork copies one page-table entry per 2 MiB instead of 512, and a trial's exit
drops them as fast.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
import threading
import time
from typing import Tuple, Union

CLONE_PARENT = 0x00008000
CLONE_CHILD_CLEARTID = 0x00200000
CLONE_CHILD_SETTID = 0x01000000
SIGCHLD = 17

# machine: (clone, get_robust_list, set_robust_list, whether clone takes tls before child_tid)
_SYSCALLS = {
    "x86_64": (56, 274, 273, False),
    "aarch64": (220, 100, 99, True),
}

MADV_COLLAPSE = 25  # linux/mman.h, Linux 6.1
HUGE_PAGE_SIZE_FILE = "/sys/kernel/mm/transparent_hugepage/hpage_pmd_size"

# clone's errors that mean "not here" (a seccomp filter, an old or unusual kernel), as opposed
# to "not now" (EAGAIN, ENOMEM: the trial's fork failed, the next may not).
UNSUPPORTED_ERRNOS = (errno.EINVAL, errno.ENOSYS, errno.EPERM)


class CloneParent:
    """Forks the calling process into a child of its parent. Build it with probe()."""

    def __init__(self, clone_nr: int, set_robust_nr: int, tls_first: bool, tid_field: int,
                 robust_head: int, robust_len: int) -> None:
        self._clone_nr = clone_nr
        self._set_robust_nr = set_robust_nr
        self._tls_first = tls_first
        self._tid_field = tid_field
        self._robust_head = robust_head
        self._robust_len = robust_len
        # The GIL stays held across the call, as os.fork() holds it across fork().
        self._syscall = ctypes.PyDLL(None, use_errno=True).syscall
        self._syscall.restype = ctypes.c_long

    @staticmethod
    def probe() -> Union["CloneParent", str]:
        """A CloneParent for this process, or why it cannot have one (to log; fork twice)."""
        machine = os.uname().machine
        numbers = _SYSCALLS.get(machine)
        if numbers is None:
            return f"clone(CLONE_PARENT) is used on x86_64 and aarch64 only, not {machine}"
        clone_nr, get_robust_nr, set_robust_nr, tls_first = numbers
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            desc = (ctypes.c_uint32 * 3).in_dll(libc, "_thread_db_pthread_tid")
        except (OSError, ValueError):
            return "the C library does not describe its thread descriptor (not glibc)"
        bits, count, offset = desc[0], desc[1], desc[2]
        if bits != 32 or count != 1 or offset > 1 << 16:
            return f"glibc's description of the thread id is unexpected ({bits}, {count}, {offset})"
        libc.pthread_self.restype = ctypes.c_void_p
        tid_field = libc.pthread_self() + offset
        if ctypes.c_int32.from_address(tid_field).value != threading.get_native_id():
            return "glibc's thread descriptor does not hold this thread's id where it says"
        head, length = ctypes.c_void_p(), ctypes.c_size_t()
        libc.syscall.restype = ctypes.c_long
        if libc.syscall(ctypes.c_long(get_robust_nr), ctypes.c_long(0), ctypes.byref(head),
                        ctypes.byref(length)) != 0 or not head.value:
            return f"get_robust_list failed: {os.strerror(ctypes.get_errno())}"
        return CloneParent(clone_nr, set_robust_nr, tls_first, tid_field, head.value,
                           length.value)

    def robust_list_empty(self) -> bool:
        """Whether this thread holds no robust mutex (its list's head points to itself)."""
        return ctypes.c_void_p.from_address(self._robust_head).value == self._robust_head

    def __call__(self) -> int:
        """0 in the child; the child's pid in the caller. OSError when clone failed (errno in
        UNSUPPORTED_ERRNOS: it never will here)."""
        sys.audit("os.fork")
        api = ctypes.pythonapi
        api.PyOS_BeforeFork()
        flags = ctypes.c_ulong(CLONE_PARENT | CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID |
                               SIGCHLD)
        tid = ctypes.c_void_p(self._tid_field)
        none = ctypes.c_void_p(0)
        if self._tls_first:  # clone(flags, stack, parent_tid, tls, child_tid)
            pid = self._syscall(ctypes.c_long(self._clone_nr), flags, none, none, none, tid)
        else:  # clone(flags, stack, parent_tid, child_tid, tls)
            pid = self._syscall(ctypes.c_long(self._clone_nr), flags, none, none, tid, none)
        if pid == 0:
            self._syscall(ctypes.c_long(self._set_robust_nr), ctypes.c_void_p(self._robust_head),
                          ctypes.c_size_t(self._robust_len))
            api.PyOS_AfterFork_Child()
            return 0
        error = ctypes.get_errno()
        api.PyOS_AfterFork_Parent()
        if pid < 0:
            raise OSError(error, os.strerror(error))
        return int(pid)


def collapse_to_huge_pages() -> Tuple[int, float]:
    """Backs this process's private anonymous memory (the [heap] and the unnamed writable private
    mappings, each from its first to its last whole huge page) with transparent huge pages where
    the kernel can: madvise(MADV_COLLAPSE), Linux 6.1, whatever the system's THP setting is
    ("madvise" or "never" included). Done before the first fork: the kernel does not collapse
    pages a child still shares. The mappings' own flags are left alone, so memory a trial
    allocates later gets the pages it would have had. A kernel without it, or a range it cannot
    collapse (no free huge page, say), is not an error: those pages stay as they are. Returns the
    bytes of anonymous memory in huge pages afterwards and the seconds it took."""
    try:
        with open(HUGE_PAGE_SIZE_FILE) as f:
            huge = int(f.read())
    except (OSError, ValueError):
        return 0, 0.0
    if huge <= 0 or huge & (huge - 1):
        return 0, 0.0
    began = time.monotonic()
    ranges = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            path = fields[5] if len(fields) > 5 else ""
            if path not in ("", "[heap]") or fields[1][:2] != "rw" or fields[1][3] != "p":
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            start = (start + huge - 1) & ~(huge - 1)
            end &= ~(huge - 1)
            if end > start:
                ranges.append((start, end - start))
    madvise = ctypes.CDLL(None, use_errno=True).madvise
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    for start, length in ranges:
        madvise(start, length, MADV_COLLAPSE)
    in_huge_pages = 0
    with open("/proc/self/smaps_rollup") as rollup:
        for line in rollup:
            if line.startswith("AnonHugePages:"):
                in_huge_pages = int(line.split()[1]) * 1024
    return in_huge_pages, time.monotonic() - began
