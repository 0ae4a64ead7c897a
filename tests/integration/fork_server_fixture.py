"""A minimal fork server for the launcher's tests (proto/README.md, "Fork server protocol").

It speaks the server's side of the protocol with nothing preloaded, and execs each request's
argv (a full command line) in the forked trial after its go, so tests can run any probe as the
trial. MODE (argv[1]) makes it misbehave on purpose:

  normal      as the protocol says
  unsafe      answers its start with {"type":"unsafe"} and exits 0
  error       answers its start with {"type":"error"} and exits 1
  silent      ready, then never answers a fork request
  garbage     answers the first fork request with a packet that is not JSON
  early-death the trial exits 7 right after naming its pid, before its go; the server waits
              until the daemon has surely reaped it before sending `forked`
  fork-failed answers every request with fork_failed
  stranger    names a pid that is not the daemon's child (its own)
"""

import array
import json
import os
import signal
import socket
import sys
import time

MODE = sys.argv[1] if len(sys.argv) > 1 else "normal"
FD = int(os.environ["TRIALD_FORK_SERVER_FD"])
chan = socket.socket(fileno=FD)


def send(obj):
    chan.send(json.dumps(obj).encode())


def recv():
    fds = array.array("i")
    msg, anc, _flags, _addr = chan.recvmsg(65536, socket.CMSG_SPACE(3 * fds.itemsize))
    for level, typ, data in anc:
        if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
    return msg, list(fds)


def trial(req, fds, pid_w):
    os.setsid()
    os.write(pid_w, str(os.getpid()).encode())
    os.close(pid_w)
    if MODE == "early-death":
        os._exit(7)
    channel, out, err = fds
    os.dup2(channel, 3)
    os.dup2(out, 1)
    os.dup2(err, 2)
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.closerange(4, 65536)
    for sig in range(1, signal.NSIG):
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    line = b""
    while not line.endswith(b"\n"):
        b = os.read(3, 1)
        if not b:
            os._exit(0)
        line += b
    if json.loads(line) != {"type": "go"}:
        os._exit(0)
    if os.getppid() != req["daemon_pid"]:
        os._exit(0)
    env = dict(kv.split("=", 1) for kv in req["env"])
    os.chdir(req["cwd"])
    os.execvpe(req["argv"][0], req["argv"], env)


def main():
    if MODE == "unsafe":
        send({"type": "unsafe", "reason": "2 threads"})
        return 0
    if MODE == "error":
        send({"type": "error", "message": "ModuleNotFoundError: No module named 'nope'"})
        return 1
    send({"type": "ready", "pid": os.getpid(), "preloaded": ["json"], "objective_loaded": False})
    while True:
        msg, fds = recv()
        if not msg:
            return 0
        req = json.loads(msg)
        if req["type"] == "stop":
            return 0
        if MODE == "silent":
            for fd in fds:
                os.close(fd)
            continue
        if MODE == "garbage":
            chan.send(b"{not json")
            continue
        if MODE == "fork-failed":
            for fd in fds:
                os.close(fd)
            send({"type": "fork_failed", "id": req["id"], "message": "Resource temporarily unavailable"})
            continue
        if MODE == "stranger":
            for fd in fds:
                os.close(fd)
            send({"type": "forked", "id": req["id"], "pid": os.getpid()})
            continue
        pid_r, pid_w = os.pipe()
        c1 = os.fork()
        if c1 == 0:
            os.close(pid_r)
            if os.fork() == 0:
                try:
                    trial(req, fds, pid_w)
                finally:
                    os._exit(127)
            os._exit(0)
        os.close(pid_w)
        pid = int(os.read(pid_r, 32))
        os.close(pid_r)
        os.waitpid(c1, 0)
        for fd in fds:
            os.close(fd)
        if MODE == "early-death":
            time.sleep(0.5)
        send({"type": "forked", "id": req["id"], "pid": pid})


sys.exit(main())
