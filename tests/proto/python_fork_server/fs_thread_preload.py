"""A preload that leaves a thread running: forking after it is not safe."""

import threading

STOP = threading.Event()
WORKER = threading.Thread(target=STOP.wait, name="preload-worker", daemon=True)
WORKER.start()
