"""Shared by the many-node tests: how to start a launcher on a namespace node."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from tests.support.netns import Node

# The real launcher: `ip netns exec` execs it, so the Popen's pid is the launcher's.
LAUNCH = [sys.executable, "-m", "paddlike.launch"]

# A worker: prints its rank and endpoints; `--fail RANK CODE` makes one rank exit with CODE
# after `--after` seconds; the others sleep `--sleep` seconds. A hostfile start gives it
# DeepSpeed's `--local_rank=N` first, which it takes as a DeepSpeed script would.
WORKER = """
import os, sys, time
rank = int(os.environ["PADDLE_TRAINER_ID"])
print("RANK", rank, os.environ["PADDLE_TRAINER_ENDPOINTS"], os.environ["PADDLIKE_RESTART_COUNT"],
      flush=True)
argv = [a for a in sys.argv[1:] if not a.startswith("--local_rank=")]
args = dict(zip(argv[0::2], argv[1::2]))
if "--fail" in args and int(args["--fail"]) == rank and (
        int(os.environ["PADDLIKE_RESTART_COUNT"]) < int(args.get("--fail_rounds", "99"))):
    time.sleep(float(args.get("--after", "0.3")))
    sys.exit(int(args.get("--code", "3")))
time.sleep(float(args.get("--sleep", "0")))
"""


def write_worker(tmp_path: Path) -> Path:
    path = tmp_path / "worker.py"
    path.write_text(WORKER)
    return path


def ranks_and_endpoints(log_dir: Path) -> list[tuple[int, str]]:
    """(rank, PADDLE_TRAINER_ENDPOINTS) that each WORKER of a log directory printed."""
    out = []
    for log in sorted(log_dir.glob("workerlog.*")):
        for line in log.read_text().splitlines():
            if line.startswith("RANK "):
                _, rank, eps, _ = line.split()
                out.append((int(rank), eps))
    return out


def start_launcher(
    node: Node,
    ips: str,
    log_dir: Path,
    script: Path,
    *,
    options: Sequence[str] = (),
    script_args: Sequence[str] = (),
) -> subprocess.Popen[bytes]:
    return node.popen(
        [
            *LAUNCH,
            "--ips",
            ips,
            "--nproc_per_node",
            "2",
            "--log_dir",
            str(log_dir),
            *options,
            str(script),
            *script_args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
