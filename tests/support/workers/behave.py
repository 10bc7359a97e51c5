"""A worker whose behaviour depends on its rank, for supervisor tests.

    behave.py DIR ACTION_FOR_RANK0 ACTION_FOR_RANK1 ...

Every worker first writes DIR/pid.<rank> (its pid) and then, per its action:
    ok              print a line and exit 0
    exit:N          wait until every other rank is ready, print a traceback, exit N
    sigkill         wait until every other rank is ready, then SIGKILL itself
    wait            become ready and sleep until killed
    ignore_term     ignore SIGTERM, become ready, sleep until killed (needs SIGKILL)
    grandchild      start a child that sleeps (its pid in DIR/grandchild.<rank>), then wait
    lines:N         print N numbered lines and exit 0
    term_exit:N     become ready; on SIGTERM exit N (a server asked to stop)
    stop:N          on SIGTERM exit N; become ready, then SIGSTOP itself (a stopped rank)
    stop:ignore     the same, ignoring SIGTERM (needs SIGKILL)
"Ready" is the file DIR/ready.<rank>; waiting for the others has a 20 s deadline.
"""

import os
import signal
import subprocess
import sys
import time

out = sys.argv[1]
actions = sys.argv[2:]
rank = int(os.environ["PADDLE_TRAINER_ID"])
action = actions[rank] if rank < len(actions) else "wait"


def mark(name: str, value: str = "") -> None:
    tmp = os.path.join(out, f".{name}.tmp")
    with open(tmp, "w") as f:
        f.write(value)
    os.replace(tmp, os.path.join(out, name))


def others_ready() -> None:
    deadline = time.monotonic() + 20
    others = [r for r in range(len(actions)) if r != rank]
    while not all(os.path.exists(os.path.join(out, f"ready.{r}")) for r in others):
        if time.monotonic() > deadline:
            sys.exit("timed out waiting for the other ranks to be ready")
        time.sleep(0.005)


def sleep_forever() -> None:
    mark(f"ready.{rank}")
    print(f"rank {rank} ready", flush=True)
    while True:
        signal.pause()


mark(f"pid.{rank}", str(os.getpid()))
kind, _, arg = action.partition(":")
if kind == "ok":
    print(f"rank {rank} done")
elif kind == "lines":
    for i in range(int(arg)):
        print(f"line {i} of rank {rank}")
elif kind == "exit":
    mark(f"ready.{rank}")
    others_ready()
    print(f"rank {rank} is about to fail")
    print("Traceback (most recent call last):", file=sys.stderr)
    print('  File "train.py", line 3, in <module>', file=sys.stderr)
    print(f"RuntimeError: rank {rank} failed on purpose", file=sys.stderr, flush=True)
    sys.exit(int(arg))
elif kind == "sigkill":
    mark(f"ready.{rank}")
    others_ready()
    print(f"rank {rank} kills itself", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
elif kind == "wait":
    sleep_forever()
elif kind == "ignore_term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sleep_forever()
elif kind == "term_exit":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(int(arg)))
    sleep_forever()
elif kind == "stop":
    if arg == "ignore":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(int(arg)))
    mark(f"ready.{rank}")
    os.kill(os.getpid(), signal.SIGSTOP)
    while True:
        signal.pause()
elif kind == "grandchild":
    child = subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()"])
    mark(f"grandchild.{rank}", str(child.pid))
    sleep_forever()
else:
    sys.exit(f"unknown action {action!r}")
