#!/usr/bin/env python3
"""A triald objective using only the standard library.

Reads the trial's parameters from TRIALD_PARAMS (x and y default to 0, shape to "bowl"; others
are ignored), reports five intermediate values and a final value as JSON lines on the descriptor
named by TRIALD_REPORT_FD, and stops promptly on SIGTERM (which is how triald prunes, cancels and
times out a trial).
"""

import json
import os
import signal
import sys
import time

STEPS = 5


def on_sigterm(signum, frame):
    # Exit at once: the daemon already decided the outcome, and it kills the whole process
    # group after the grace period anyway.
    print("quadratic: stopped by SIGTERM", flush=True)
    sys.exit(143)


def send(report, message):
    # One compact JSON object per line: the report protocol.
    report.write(json.dumps(message, separators=(",", ":")) + "\n")


def objective(params):
    # Every parameter is optional and unknown ones are ignored, so one script serves sweeps that
    # tune any subset (quadratic.toml, tpe.toml, grid.toml).
    x = float(params.get("x", 0.0))
    y = float(params.get("y", 0.0))
    value = (x - 1.0) ** 2 + (y + 2.0) ** 2
    if params.get("shape", "bowl") == "tilted":
        value += 0.5 * x
    return value


def main():
    signal.signal(signal.SIGTERM, on_sigterm)
    params = json.loads(os.environ["TRIALD_PARAMS"])
    fd = os.environ.get("TRIALD_REPORT_FD")
    # Run by hand (no daemon), the reports go to stderr so the script is still easy to try.
    report = os.fdopen(int(fd), "w", buffering=1) if fd else sys.stderr

    final = objective(params)
    for step in range(STEPS):
        time.sleep(0.05)
        # A value that converges to the objective, as a training loss would.
        value = final + (STEPS - 1 - step) * 1.0
        send(report, {"type": "report", "step": step, "value": value})

    send(report, {"type": "final", "value": final})
    report.flush()
    print("quadratic: x=%s y=%s shape=%s -> %.6g"
          % (params.get("x", 0.0), params.get("y", 0.0), params.get("shape", "bowl"), final),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
