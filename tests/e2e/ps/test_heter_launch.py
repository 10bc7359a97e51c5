"""ps-heter jobs through the launcher: servers, CPU trainers and heter trainers on one node
and on two namespace nodes; the job ends 0 when the trainers and then the heter trainers
finish, and with a heter trainer's own exit code when it fails."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.nodes.test_start import clean_env
from tests.support.netns import Node, netns_cluster

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = str(REPO / "examples" / "ps_heter_ctr.py")
ONE_NODE = ["--server_num", "2", "--worker_num", "2", "--heter_worker_num", "1"]

# No runtime: the heter trainer exits with code argv[1] after 0.3 s; the others sleep.
BEHAVE = """
import os, sys, time
if os.environ["TRAINING_ROLE"] == "HETER_TRAINER":
    time.sleep(0.3)
    sys.exit(int(sys.argv[1]))
time.sleep(60)
"""


def _launch(tmp_path: Path, *argv: str, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "paddlike.launch", "--tee", "none", "--kill_timeout", "3", *argv],
        cwd=tmp_path,
        env=dict(clean_env(), PADDLIKE_TIMEOUT="20"),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _summary(log_dir: Path) -> dict:
    return json.loads((log_dir / "summary.json").read_text())


@pytest.mark.timeout(120)
def test_two_servers_two_trainers_and_a_heter_trainer_train_the_ctr_example_to_exit_0(
    tmp_path: Path,
) -> None:
    run = _launch(tmp_path, *ONE_NODE, "--heter_devices", "cpu", EXAMPLE, "--steps", "150")
    log = tmp_path / "log"
    assert run.returncode == 0, run.stderr + (log / "heterlog.0").read_text()
    assert "2 servers, 2 workers, 1 heter worker on this node" in run.stderr
    assert "reached target" in (log / "workerlog.0").read_text()
    assert "every trainer ended after 150 steps" in (log / "heterlog.0").read_text()
    procs = _summary(log)["processes"]
    assert sorted((p["role"], p["rank"], p["status"]) for p in procs) == [
        ("heter", 0, "ok"),
        ("server", 0, "ok"),
        ("server", 1, "ok"),
        ("trainer", 0, "ok"),
        ("trainer", 1, "ok"),
    ]
    heter = next(p for p in procs if p["role"] == "heter")
    # waited for like a trainer (exit 0 by itself), not stopped like a server
    assert (heter["exit_code"], heter["signal"]) == (0, None)
    shown = subprocess.run(
        [sys.executable, "-m", "paddlike.logs", str(log)], capture_output=True, text=True
    )
    assert shown.returncode == 0, shown.stderr
    rows = [line.split() for line in shown.stdout.splitlines()]
    assert ["heter", "(stage", "2)", "0", "0"] in [r[:5] for r in rows], shown.stdout
    assert "heter rank 0 local 0 restart 0 stage 2:" in (log / "heterlog.0").read_text()


@pytest.mark.timeout(60)
def test_a_heter_trainer_exiting_3_ends_the_job_with_3_and_names_it(tmp_path: Path) -> None:
    (tmp_path / "behave.py").write_text(BEHAVE)
    run = _launch(tmp_path, *ONE_NODE, "--heter_devices", "cpu", "behave.py", "3", timeout=50)
    assert run.returncode == 3, run.stderr
    assert "FAILED: heter rank 0 exited with code 3" in run.stderr
    cause = _summary(tmp_path / "log")["root_cause"]
    assert (cause["role"], cause["rank"], cause["exit_code"]) == ("heter", 0, 3)


# Trainers end at once; the heter trainer 1 s later, leaving a file; servers print on
# SIGTERM whether that file was there (they must be stopped only after it).
LIFECYCLE = """
import os, signal, sys, time
role = os.environ["TRAINING_ROLE"]
if role == "PSERVER":
    def stop(*_):
        print("heter done before stop:", os.path.exists("HETER_DONE"), flush=True)
        sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
    time.sleep(60)
    sys.exit(9)
if role == "HETER_TRAINER":
    time.sleep(1)
    open("HETER_DONE", "w").close()
"""


@pytest.mark.timeout(60)
def test_servers_are_stopped_only_after_the_heter_trainers_finish_by_themselves(
    tmp_path: Path,
) -> None:
    (tmp_path / "life.py").write_text(LIFECYCLE)
    run = _launch(tmp_path, *ONE_NODE, "--heter_devices", "cpu", "life.py", timeout=50)
    assert run.returncode == 0, run.stderr
    for n in range(2):
        assert "heter done before stop: True" in (tmp_path / "log" / f"serverlog.{n}").read_text()
    heter = next(p for p in _summary(tmp_path / "log")["processes"] if p["role"] == "heter")
    assert (heter["exit_code"], heter["signal"], heter["status"]) == (0, None, "ok")


# Two heter stages (tests/support/ps_workers/heter_chain.py); the server only waits to be stopped.
CHAIN = f"""
import os, runpy, signal, sys, time
if os.environ["TRAINING_ROLE"] == "PSERVER":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    time.sleep(60)
    sys.exit(9)
chain = {str(REPO / "tests" / "support" / "ps_workers" / "heter_chain.py")!r}
runpy.run_path(chain, run_name="__main__")
"""


@pytest.mark.timeout(60)
def test_batches_pass_through_two_heter_stages_started_by_the_launcher(tmp_path: Path) -> None:
    (tmp_path / "chain.py").write_text(CHAIN)
    argv = ["--server_num", "1", "--worker_num", "2", "--heter_worker_num", "1;1"]
    run = _launch(tmp_path, *argv, "--heter_devices", "cpu;cpu", "chain.py", timeout=50)
    log = tmp_path / "log"
    assert run.returncode == 0, run.stderr
    assert "stage 2 of 3: done, 8 batches" in (log / "heterlog.0").read_text()
    assert "stage 3 of 3: done, 8 batches" in (log / "heterlog.1").read_text()


def _launch_on(node: Node, tmp_path: Path, *argv: str) -> subprocess.Popen[str]:
    full = [sys.executable, "-m", "paddlike.launch", "--servers", "nodea:6170,nodeb:6170",
            "--workers", "nodea,nodeb", "--heter_workers", "nodeb:6200", "--heter_devices", "cpu",
            "--log_dir", f"log_{node.hostname}", "--tee", "none", "--kill_timeout", "3",
            *argv]  # fmt: skip
    env = dict(clean_env(), PADDLIKE_TIMEOUT="20")
    return node.popen(full, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)


@pytest.mark.netns
@pytest.mark.timeout(120)
def test_the_same_job_across_two_nodes_ends_0_on_both(tmp_path: Path) -> None:
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        procs = [_launch_on(n, tmp_path, EXAMPLE, "--steps", "150") for n in cluster.nodes]
        errs = [p.communicate(timeout=90)[1] for p in procs]
    a, b = tmp_path / "log_nodea", tmp_path / "log_nodeb"
    for p, err in zip(procs, errs, strict=True):
        assert p.returncode == 0, err + (b / "heterlog.0").read_text()
    assert "reached target" in (a / "workerlog.0").read_text()
    assert "every trainer ended after 150 steps" in (b / "heterlog.0").read_text()
    roles = [[p["role"] for p in _summary(d)["processes"]] for d in (a, b)]
    assert roles == [["server", "trainer"], ["server", "trainer", "heter"]]
    for d in (a, b):
        assert _summary(d)["status"] == "succeeded"


@pytest.mark.netns
@pytest.mark.timeout(90)
def test_a_heter_trainer_exiting_3_on_node_b_ends_both_nodes_with_3(tmp_path: Path) -> None:
    (tmp_path / "behave.py").write_text(BEHAVE)
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        procs = [_launch_on(n, tmp_path, "behave.py", "3") for n in cluster.nodes]
        errs = [p.communicate(timeout=60)[1] for p in procs]
    assert [p.returncode for p in procs] == [3, 3], "".join(errs)
    causes = [_summary(tmp_path / f"log_{h}")["root_cause"] for h in ("nodea", "nodeb")]
    assert causes[0] == causes[1]
    assert (causes[0]["role"], causes[0]["rank"], causes[0]["exit_code"]) == ("heter", 0, 3)
