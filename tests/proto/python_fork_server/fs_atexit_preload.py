"""A preload that registers an atexit handler (the server's own clean-up; never a trial's)."""

import atexit
import os


def _server_exit():
    path = os.environ.get("FORK_TEST_SERVER_ATEXIT")
    if path:
        with open(path, "a") as f:
            f.write(f"{os.getpid()}\n")


atexit.register(_server_exit)
