"""A preload that starts a thread later, when the server gets SIGUSR1: the check before the next
fork finds it."""

import signal
import threading

STOP = threading.Event()


def _start_thread(signum, frame):
    threading.Thread(target=STOP.wait, name="late-worker", daemon=True).start()


signal.signal(signal.SIGUSR1, _start_thread)
