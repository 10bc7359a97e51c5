"""DeepSpeed's `--local_rank=N` (issue 31/32): a DeepSpeed script started by a
DeepSpeed-style command (a hostfile) reads its local rank from argparse, as under
`deepspeed`; --no_local_rank and a torchrun-style start give it nothing, so its argparse
default (-1) stays and a script that parses its arguments strictly still runs. Real
launchers on a namespace node (a one-host hostfile of this machine runs here, without
ssh), and over real OpenSSH for two hosts."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.e2e.cluster.common import site
from tests.support.netns import Node, netns_cluster

pytestmark = pytest.mark.timeout(150)
LAUNCH = [sys.executable, "-m", "paddlike.launch"]
REPO = Path(__file__).resolve().parents[3]

# A DeepSpeed script's argument parsing: --local_rank with -1 as its default; strict, so
# an argument it does not know ends it with exit 2. Rank 1 of the first round exits 3
# when told to (--fail_first_round), for the restart.
DS_WORKER = """#!{python}
import argparse, os
p = argparse.ArgumentParser()
p.add_argument("--local_rank", type=int, default=-1)
p.add_argument("--epochs", type=int, required=True)
p.add_argument("--fail_first_round", action="store_true")
a = p.parse_args()
rank, restart = os.environ["RANK"], os.environ["PADDLIKE_RESTART_COUNT"]
print("GOT", rank, restart, a.local_rank, a.epochs, flush=True)
if a.fail_first_round and rank == "1" and restart == "0":
    raise SystemExit(3)
"""
# torchrun's kind of script: no --local_rank, strict parsing
STRICT_WORKER = """
import argparse, os
p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, required=True)
a = p.parse_args()
print("GOT", os.environ["RANK"], os.environ["PADDLIKE_RESTART_COUNT"], "-", a.epochs, flush=True)
"""


def _write(tmp: Path, text: str, name: str = "ds_worker.py") -> Path:
    path = tmp / name
    path.write_text(text.replace("{python}", sys.executable))
    path.chmod(0o755)
    return path


def _launch(node: Node, tmp: Path, *argv: str):
    env = {**os.environ, "PYTHONPATH": f"{tmp}{os.pathsep}{REPO}"}  # -m finds the worker
    command = [*LAUNCH, "--log_dir", str(tmp / "log"), *argv]
    return node.run(command, timeout=120, capture_output=True, text=True, cwd=tmp, env=env)


def _got(log_dir: Path) -> list[tuple[str, ...]]:
    """(rank, restart, local rank as the script parsed it, epochs) of every worker line."""
    return sorted(
        tuple(line.split()[1:])
        for log in log_dir.rglob("workerlog.*")
        for line in log.read_text().split("\n")[:-1]
        if line.startswith("GOT ")
    )


def _hostfile(tmp: Path, text: str = "localhost slots=2\n") -> str:
    (tmp / "hostfile").write_text(text)
    return str(tmp / "hostfile")


@pytest.mark.parametrize(
    "how", [("{script}",), ("-m", "ds_worker"), ("--no_python", "{script}")],
    ids=["script", "module", "no_python"],
)  # fmt: skip
def test_a_hostfile_start_gives_each_worker_its_local_rank_as_deepspeed_does(
    tmp_path, how
) -> None:
    script = str(_write(tmp_path, DS_WORKER))
    command = [a.replace("{script}", script) for a in how]
    with netns_cluster(1, ["solo"]) as cluster:
        done = _launch(cluster.nodes[0], tmp_path, "--hostfile", _hostfile(tmp_path),
                       *command, "--epochs", "3")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert _got(tmp_path / "log") == [("0", "0", "0", "3"), ("1", "0", "1", "3")]


@pytest.mark.parametrize(
    "options",
    [("--hostfile", "{hostfile}", "--no_local_rank"), ("--nproc_per_node", "2")],
    ids=["no_local_rank", "torchrun_style"],
)
def test_no_local_rank_and_a_torchrun_style_start_pass_no_argument(tmp_path, options) -> None:
    hostfile = _hostfile(tmp_path)
    given = [o.replace("{hostfile}", hostfile) for o in options]
    ds, strict = _write(tmp_path, DS_WORKER), _write(tmp_path, STRICT_WORKER, "strict.py")
    with netns_cluster(1, ["solo"]) as cluster:
        node = cluster.nodes[0]
        done = _launch(node, tmp_path, "--devices", "cpu", *given, str(ds), "--epochs", "3")
        assert done.returncode == 0, done.stdout + done.stderr
        assert _got(tmp_path / "log") == [("0", "0", "-1", "3"), ("1", "0", "-1", "3")]
        done = _launch(node, tmp_path, "--log_overwrite", "--devices", "cpu", *given,
                       str(strict), "--epochs", "4")  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr  # argparse refused nothing
        assert _got(tmp_path / "log") == [("0", "0", "-", "4"), ("1", "0", "-", "4")]


@pytest.mark.parametrize("preload", [False, True], ids=["cold", "preload"])
def test_a_restarted_round_gets_the_local_rank_again_cold_and_preloaded(
    tmp_path, preload
) -> None:
    script = str(_write(tmp_path, DS_WORKER))
    given = ["--preload", "argparse"] if preload else []
    with netns_cluster(1, ["solo"]) as cluster:
        done = _launch(cluster.nodes[0], tmp_path, "--hostfile", _hostfile(tmp_path),
                       "--max_restarts", "1", *given, script, "--epochs", "3",
                       "--fail_first_round")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "restart 1 of 1 after: trainer rank 1 exited with code 3" in done.stderr
    assert ("preloaded argparse in" in done.stderr) is preload
    got = _got(tmp_path / "log")  # rank 0 of the first round may be ended before its line
    assert ("1", "0", "1", "3") in got
    assert [g for g in got if g[1] == "1"] == [("0", "1", "0", "3"), ("1", "1", "1", "3")]


def test_every_host_of_a_cluster_start_gives_its_workers_their_local_ranks(tmp_path) -> None:
    with site(tmp_path, hosts=2) as s:
        script = _write(tmp_path, DS_WORKER)
        hostfile = s.hostfile("h0 slots=2\nh1 slots=1\n")
        argv = s.argv(hostfile, "--devices", "cpu", script_args=["--epochs", "5"])
        argv[argv.index(str(s.worker))] = str(script)
        done = s.run(argv, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        assert _got(s.tmp / "log") == [("0", "0", "0", "5"), ("1", "0", "1", "5"),
                                       ("2", "0", "0", "5")]  # fmt: skip
        assert s.leftovers() == {}
