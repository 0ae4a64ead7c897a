"""An objective whose forked child must end on SIGTERM (python_runner_test.py)."""

import multiprocessing
import time


def terminated_child(trial):
    # multiprocessing's fork start method, as joblib and PyTorch's DataLoader use it: the
    # child must not inherit the runner's SIGTERM handler, or terminate() would not end it.
    child = multiprocessing.get_context("fork").Process(target=time.sleep, args=(60,))
    child.start()
    child.terminate()
    child.join(10)
    return child.exitcode  # -15 once SIGTERM ended it; None (a failed trial) if it lives on
