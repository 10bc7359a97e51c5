"""Regenerate log_samples/: real log directories written by paddlike's own launcher.

    make log-samples        # or: .venv/bin/python log_samples/regenerate.py [NAME ...]

Each sample is one run of `python -m paddlike.launch` with a tiny script
(log_samples/scripts/), kept with the console output it printed (NAME.console.txt).
The log reader's tests run on these directories, and the docs quote them.

    success/          2 CPU workers that finish
    failed/           rank 1 exits 3 with a Python traceback; rank 0 is stopped
    restarted/        rank 1 fails in the first round; --max_restarts 1 runs a second
    ps/               parameter-server mode: 1 server, 2 trainers
    hung/             a torch gloo job whose rank 2 is stuck in `load_batch`;
                      --hang_timeout 5 --on_hang abort names it and ends the job (124)
    hung_flight/      paddlike's own collectives, heartbeat() per step: rank 2 stops before its
                      20th all_reduce, rank 1 is slow; progress files and flight records kept
    torch_flight/     a torch gloo job whose rank 1 skipped an all_reduce and waits in
                      barrier; named from torch's flight record (--hang_timeout 5, 124)
    elastic_lost/     an elastic job (--nnodes 2:3) of three loopback "nodes" on this machine;
                      node 2's launcher is SIGKILLed, the others finish in a round of two
    two_node/nodea/   a 2-node job (network namespaces nodea, nodeb), one directory
    two_node/nodeb/   per node; skipped with a message where namespaces are unavailable
    NAME.html         each sample's page (python -m paddlike.logs NAME --html NAME.html);
                      `regenerate.py pages` writes only these, from the directories as they are

Only loopback and private test namespaces (198.18.0.0/24) are used.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TIMEOUT = 120.0  # seconds for one launcher run

def _launch(
    name: str, args: list[str], *, env: dict[str, str] | None = None, expect: int = 0
) -> None:
    """Run the launcher into log_samples/NAME; keep its console output beside it."""
    log_dir = HERE / name
    shutil.rmtree(log_dir, ignore_errors=True)
    argv = [
        sys.executable,
        "-m",
        "paddlike.launch",
        "--log_dir",
        str(log_dir.relative_to(ROOT)),
        "--job_id",
        f"sample-{name}",
        *args,
    ]
    full_env = {**_clean_env(), **(env or {})}
    proc = subprocess.run(
        argv, cwd=ROOT, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, timeout=TIMEOUT,
    )
    console = HERE / f"{name}.console.txt"
    console.write_text(
        "$ " + " ".join(["python", *argv[1:]]) + "\n" + proc.stdout
        + f"[exit code {proc.returncode}]\n"
    )
    if proc.returncode != expect:
        # A sample that shows something else than its name says would mislead the docs.
        shutil.rmtree(log_dir, ignore_errors=True)
        raise SampleFailed(
            f"{name}: launcher exited {proc.returncode}, expected {expect}; sample removed "
            f"(console output kept in {console.relative_to(ROOT)})"
        )
    _drop_lock(log_dir)
    print(f"{name}: launcher exited {proc.returncode} as expected")


def _drop_lock(log_dir: Path) -> None:
    """The lock and owner files are the launcher's run-time state, not part of the sample
    (the launcher removes the owner file itself; the flock file stays behind)."""
    for name in (".paddlike.lock", ".paddlike.owner"):
        (log_dir / name).unlink(missing_ok=True)


class SampleFailed(Exception):
    """A sample run did not end as the sample needs; the message says how."""


def _clean_env() -> dict[str, str]:
    """Our environment minus the launcher's own variables and proxies (loopback only)."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PADDLIKE_")
        and k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")
    }


def success() -> None:
    _launch("success", ["--nproc_per_node", "2", "log_samples/scripts/train.py"])


def failed() -> None:
    _launch(
        "failed",
        ["--nproc_per_node", "2", "--kill_timeout", "2", "log_samples/scripts/train.py"],
        env={"SAMPLE_FAIL_RANK": "1"},
        expect=3,
    )


def restarted() -> None:
    _launch(
        "restarted",
        ["--nproc_per_node", "2", "--max_restarts", "1", "log_samples/scripts/train.py"],
        env={"SAMPLE_FAIL_RANK": "1", "SAMPLE_FAIL_ROUNDS": "1"},
    )


def ps() -> None:
    _launch("ps", ["--server_num", "1", "--worker_num", "2", "log_samples/scripts/ps_train.py"])


def hung() -> None:
    _launch(
        "hung",
        [
            "--nproc_per_node", "3", "--hang_timeout", "5", "--on_hang", "abort",
            "--kill_timeout", "2", "log_samples/scripts/hung.py",
        ],
        expect=124,
    )  # fmt: skip


def hung_flight() -> None:
    _launch(
        "hung_flight",
        [
            "--nproc_per_node", "4", "--hang_timeout", "3", "--on_hang", "abort",
            "--kill_timeout", "2", "log_samples/scripts/hung_flight.py",
        ],
        expect=124,
    )  # fmt: skip


def elastic_lost() -> None:
    """Three launchers on this machine (loopback "nodes"), `--nnodes 2:3`; once node 2 has
    started, its launcher is SIGKILLed: the other two notice (--heartbeat_timeout 2) and
    finish in a round of two. One shared log directory: the top and one per later node."""
    import json
    import signal
    import tempfile
    import time

    name, log_dir = "elastic_lost", HERE / "elastic_lost"
    shutil.rmtree(log_dir, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="paddlike-sample-ckpt-") as ckpt:
        argv = [
            sys.executable, "-m", "paddlike.launch", "--nnodes", "2:3", "--master",
            "127.0.0.1:29931", "--nproc_per_node", "1", "--heartbeat_timeout", "2",
            "--rdzv_last_call", "1", "--log_dir", f"log_samples/{name}", "--job_id",
            f"sample-{name}", "examples/elastic_train.py", "--steps", "120",
            "--checkpoint_every", "10", "--step_time", "0.05", "--checkpoint", ckpt,
        ]  # fmt: skip
        procs = [
            subprocess.Popen(argv, cwd=ROOT, env=_clean_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
            for _ in range(3)
        ]  # fmt: skip
        try:
            victim = None
            deadline = time.monotonic() + 30
            while victim is None and time.monotonic() < deadline:
                for summary in log_dir.glob("**/summary.json"):
                    try:
                        data = json.loads(summary.read_text())
                        owner = json.loads((summary.parent / ".paddlike.owner").read_text())
                    except (OSError, ValueError):
                        continue
                    mine = {p.pid: p for p in procs}
                    if data.get("node_index") == 2 and data.get("processes") and owner.get(
                        "pid"
                    ) in mine:
                        victim = mine[owner["pid"]]
                time.sleep(0.2)
            if victim is None:
                raise SampleFailed(f"{name}: node 2 never started its worker")
            time.sleep(1.0)  # a few steps into the round
            victim.send_signal(signal.SIGKILL)
            outs = [p.communicate(timeout=TIMEOUT)[0] for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    codes = [p.returncode for p in procs]
    console = "$ python " + " ".join(argv[1:]) + "   # three times; node 2's launcher SIGKILLed\n"
    for i, (p, out) in enumerate(zip(procs, outs, strict=True)):
        console += f"--- launcher {i} ---\n{out}[exit code {p.returncode}]\n"
    (HERE / f"{name}.console.txt").write_text(console.replace(ckpt, "CKPT"))
    if sorted(codes) != [-signal.SIGKILL, 0, 0]:
        shutil.rmtree(log_dir, ignore_errors=True)
        raise SampleFailed(f"{name}: launchers exited {codes}, expected two 0 and one SIGKILL")
    for lock_dir in [log_dir, *[d for d in log_dir.iterdir() if d.is_dir()]]:
        _drop_lock(lock_dir)
    print(f"{name}: node 2 lost, the other two finished as expected")


def torch_flight() -> None:
    _launch(
        "torch_flight",
        [
            "--nproc_per_node", "3", "--hang_timeout", "5", "--on_hang", "abort",
            "--kill_timeout", "2", "log_samples/scripts/torch_flight.py",
        ],
        expect=124,
    )  # fmt: skip


def two_node() -> None:
    sys.path.insert(0, str(ROOT))
    from tests.support.netns import netns_cluster, netns_unavailable_reason

    reason = netns_unavailable_reason()
    if reason:
        print(f"two_node: skipped: {reason}")
        return
    base = HERE / "two_node"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir()
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        procs = []
        for node in cluster.nodes:
            argv = [
                sys.executable,
                "-m",
                "paddlike.launch",
                "--ips",
                "nodea,nodeb",
                "--nproc_per_node",
                "2",
                "--job_id",
                "sample-two-node",
                "--log_dir",
                f"log_samples/two_node/{node.hostname}",
                "log_samples/scripts/train.py",
            ]
            procs.append(
                (
                    node,
                    argv,
                    node.popen(
                        argv,
                        cwd=ROOT,
                        env=_clean_env(),
                        stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT,
                    ),
                )
            )
        for node, argv, proc in procs:
            out, _ = proc.communicate(timeout=TIMEOUT)
            (base / f"{node.hostname}.console.txt").write_text(
                f"$ python {' '.join(argv[1:])}   # on {node.hostname}\n"
                + out.decode(errors="replace")
                + f"[exit code {proc.returncode}]\n"
            )
            if proc.returncode != 0:
                shutil.rmtree(base, ignore_errors=True)
                raise SampleFailed(
                    f"two_node: launcher on {node.hostname} exited {proc.returncode}, expected 0; "
                    "sample removed"
                )
            _drop_lock(base / node.hostname)
            print(f"two_node/{node.hostname}: launcher exited 0 as expected")


def write_page(name: str) -> None:
    """NAME.html beside the sample: its page (`python -m paddlike.logs NAME --html`)."""
    if not (HERE / name).is_dir():
        return
    page = HERE / f"{name}.html"
    page.unlink(missing_ok=True)
    # It exits with the job's outcome (3 for `failed`): the page is what counts.
    subprocess.run(
        [sys.executable, "-m", "paddlike.logs", f"log_samples/{name}", "--html",
         f"log_samples/{name}.html"],
        cwd=ROOT, env=_clean_env(), timeout=TIMEOUT, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    if not page.is_file():
        raise SampleFailed(f"{name}: python -m paddlike.logs --html wrote no page")


def pages() -> None:
    """Only the pages, from the directories as they are (`regenerate.py pages`)."""
    for name in SAMPLES:
        if name != "pages":
            write_page(name)


SAMPLES: dict[str, Callable[[], None]] = {
    "success": success,
    "failed": failed,
    "restarted": restarted,
    "ps": ps,
    "hung": hung,
    "hung_flight": hung_flight,
    "torch_flight": torch_flight,
    "elastic_lost": elastic_lost,
    "two_node": two_node,
    "pages": pages,
}


def main(argv: list[str]) -> int:
    names = argv or [n for n in SAMPLES if n != "pages"]  # each run writes its page
    unknown = [n for n in names if n not in SAMPLES]
    if unknown:
        print(f"regenerate.py: unknown sample {unknown[0]!r}; choose from {', '.join(SAMPLES)}")
        return 2
    failures = 0
    for name in names:
        try:
            SAMPLES[name]()
            write_page(name)
        except (SampleFailed, subprocess.TimeoutExpired) as exc:
            print(f"regenerate.py: {exc}", file=sys.stderr)
            failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
