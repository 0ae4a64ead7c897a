"""A preload that registers an atexit handler (the server's own clean-up; never a trial's).

The handler writes the server's pid and whether it is dumpable (prctl(PR_GET_DUMPABLE)) then."""

import atexit
import ctypes
import os


def _server_exit():
    path = os.environ.get("FORK_TEST_SERVER_ATEXIT")
    if path:
        with open(path, "a") as f:
            f.write(f"{os.getpid()} dumpable={ctypes.CDLL(None).prctl(3, 0, 0, 0, 0)}\n")


atexit.register(_server_exit)
