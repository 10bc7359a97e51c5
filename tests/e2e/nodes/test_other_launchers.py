"""Two namespace nodes started with other launchers' command lines and environments.

Users bring torchrun's command line (`--nproc-per-node`, `--master-addr`, its c10d
rendezvous), Kubeflow's PyTorchJob variables (`PET_*`) and Paddle's spellings (`--rank`,
`--max_restart`). Each node here is a network namespace with its own working directory, as
two machines would be: the same relative `train.py` and the default `log/` on each. The
one-node parse of every spelling is tests/launch/context/options/test_spellings.py; this file checks
that
the job they describe on two nodes is one job, and that refusals stop every node at once.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest

from tests.support.multinode_common import LAUNCH, write_worker
from tests.support.netns import Node, netns_cluster

pytestmark = pytest.mark.netns

DUMP_ENV = Path(__file__).resolve().parents[2] / "support" / "workers" / "dump_env.py"
# Each namespace has its own network stack, but the launchers' port registry
# (/tmp/paddlike-ports-<uid>) is one per machine: node 0 of every test claims its --master_port
# there, so each test has its own port (the launchers meet at the next one).
PORTS = {"torchrun": 29500, "pet": 29510, "pet_flag": 29520, "c10d": 29530, "paddle": 29540,
         "ps": 29550, "refused": 29560}  # fmt: skip
NAMES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK",
         "PADDLE_TRAINER_ENDPOINTS", "PADDLE_CURRENT_ENDPOINT", "MASTER_ADDR", "MASTER_PORT",
         "PADDLE_MASTER", "PADDLE_JOB_ID", "TORCHELASTIC_RUN_ID")  # fmt: skip


def _clean_env(**extra: str) -> dict[str, str]:
    """This machine's environment without any launcher's or scheduler's variables."""
    drop = ("PADDLIKE_", "PADDLE_", "PET_", "SLURM_", "TORCHELASTIC_", "OMPI_", "POD_IP",
            "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")  # fmt: skip
    return {**{k: v for k, v in os.environ.items() if not k.startswith(drop)}, **extra}


def _node_dirs(tmp_path: Path, n: int, script: Path = DUMP_ENV) -> list[Path]:
    """One working directory per node holding `train.py` and an empty `envs/`."""
    dirs = []
    for i in range(n):
        d = tmp_path / f"node{i}"
        (d / "envs").mkdir(parents=True)
        shutil.copy(script, d / "train.py")
        dirs.append(d)
    return dirs


def _start(
    node: Node, cwd: Path, argv: Sequence[str], env: Mapping[str, str] | None = None
) -> subprocess.Popen[str]:
    return node.popen(
        [*LAUNCH, *argv],
        cwd=cwd,
        env=dict(env) if env is not None else _clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(procs: Sequence[subprocess.Popen[str]], timeout: float = 60) -> list[tuple[str, str]]:
    """Every launcher's (stdout, stderr); past `timeout`, fail showing what each one said."""
    deadline = time.monotonic() + timeout
    try:
        return [p.communicate(timeout=max(0.1, deadline - time.monotonic())) for p in procs]
    except subprocess.TimeoutExpired:
        for p in procs:
            if p.poll() is None:
                p.kill()
        said = [(p.returncode, *p.communicate()) for p in procs]
        pytest.fail(f"a launcher still ran after {timeout} s; (exit code, stdout, stderr): {said}")


def _envs(node_dir: Path) -> dict[int, dict[str, str]]:
    """Global rank -> the variables of NAMES each worker of that node was started with."""
    out = {}
    for path in sorted((node_dir / "envs").glob("env.*.json")):
        env = json.loads(path.read_text())
        out[int(env["RANK"])] = {n: env.get(n) for n in NAMES}
    return out


def _assert_one_job(dirs: Sequence[Path], nproc: int, outs: object) -> list[dict[str, str]]:
    """Node i holds ranks i*nproc.., and every worker of every node sees the same job."""
    nnodes = len(dirs)
    every = []
    for i, d in enumerate(dirs):
        envs = _envs(d)
        assert sorted(envs) == list(range(i * nproc, (i + 1) * nproc)), outs
        for env in envs.values():
            assert env["NODE_RANK"] == env["GROUP_RANK"] == str(i)
            assert env["WORLD_SIZE"] == str(nnodes * nproc)
            assert env["LOCAL_WORLD_SIZE"] == str(nproc)
        every += envs.values()
    shared = ("PADDLE_TRAINER_ENDPOINTS", "MASTER_ADDR", "MASTER_PORT", "PADDLE_MASTER",
              "PADDLE_JOB_ID")  # fmt: skip
    for name in shared:
        assert len({env[name] for env in every}) == 1, (name, every)
    endpoints = every[0]["PADDLE_TRAINER_ENDPOINTS"].split(",")
    assert len(set(endpoints)) == nnodes * nproc
    for env in every:
        assert env["PADDLE_CURRENT_ENDPOINT"] == endpoints[int(env["RANK"])]
    logs = {(d / "log" / "endpoints.log").read_text() for d in dirs}
    assert logs == {"PADDLE_TRAINER_ENDPOINTS: \n" + "\n".join(endpoints)}, logs
    return every


def _torchrun_line(rank: int, master: Node, port: int, *extra: str) -> list[str]:
    return ["--nnodes", "2", "--nproc-per-node", "2", "--node-rank", str(rank),
            "--master-addr", master.addr, "--master-port", str(port), *extra,
            "train.py", "envs"]  # fmt: skip


def test_torchruns_exact_command_line_on_two_nodes_runs_one_job_of_four_ranks(tmp_path):
    dirs = _node_dirs(tmp_path, 2)
    with netns_cluster(2) as cluster:
        node0 = cluster.nodes[0]
        procs = [
            _start(node, d, _torchrun_line(i, node0, PORTS["torchrun"]))
            for i, (node, d) in enumerate(zip(cluster.nodes, dirs, strict=True))
        ]
        outs = _finish(procs)
    assert [p.returncode for p in procs] == [0, 0], outs
    every = _assert_one_job(dirs, 2, outs)
    # torchrun's meaning: the workers meet at --master_addr:--master_port
    master = (every[0]["MASTER_ADDR"], every[0]["MASTER_PORT"])
    assert master == (node0.addr, str(PORTS["torchrun"]))
    hosts = [e.rpartition(":")[0] for e in every[0]["PADDLE_TRAINER_ENDPOINTS"].split(",")]
    assert hosts == [node0.addr, node0.addr, cluster.nodes[1].addr, cluster.nodes[1].addr]


def _kubeflow_env(rank: int, master: Node, port: int) -> dict[str, str]:
    """What Kubeflow's PyTorchJob puts into the pod of node `rank`."""
    return _clean_env(
        PET_NNODES="2",
        PET_NPROC_PER_NODE="2",
        PET_NODE_RANK=str(rank),
        PET_MASTER_ADDR=master.addr,
        PET_MASTER_PORT=str(port),
    )


def test_kubeflows_pet_variables_alone_configure_the_same_two_node_job(tmp_path):
    dirs = _node_dirs(tmp_path, 2)
    with netns_cluster(2) as cluster:
        node0 = cluster.nodes[0]
        procs = [
            _start(node, d, ["train.py", "envs"], env=_kubeflow_env(i, node0, PORTS["pet"]))
            for i, (node, d) in enumerate(zip(cluster.nodes, dirs, strict=True))
        ]
        outs = _finish(procs)
    assert [p.returncode for p in procs] == [0, 0], outs
    every = _assert_one_job(dirs, 2, outs)
    assert (every[0]["MASTER_ADDR"], every[0]["MASTER_PORT"]) == (node0.addr, str(PORTS["pet"]))


def test_a_flag_wins_over_kubeflows_pet_variable_on_both_nodes(tmp_path):
    dirs = _node_dirs(tmp_path, 2)
    with netns_cluster(2) as cluster:
        node0 = cluster.nodes[0]
        argv = ["--nproc-per-node", "1", "train.py", "envs"]
        procs = [
            _start(node, d, argv, env=_kubeflow_env(i, node0, PORTS["pet_flag"]))
            for i, (node, d) in enumerate(zip(cluster.nodes, dirs, strict=True))
        ]
        outs = _finish(procs)
    assert [p.returncode for p in procs] == [0, 0], outs
    every = _assert_one_job(dirs, 1, outs)  # one worker per node, not PET's two
    assert {e["WORLD_SIZE"] for e in every} == {"2"}


def test_torchruns_c10d_form_identical_on_both_nodes_is_one_job_named_by_rdzv_id(tmp_path):
    dirs = _node_dirs(tmp_path, 2)
    with netns_cluster(2) as cluster:
        node0, node1 = cluster.nodes
        argv = ["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                "--rdzv-endpoint", f"{node0.addr}:{PORTS['c10d']}", "--rdzv-id", "job1",
                "train.py", "envs"]  # fmt: skip
        # node 1 first: its rank must come from the rendezvous, not from who started first
        procs = [_start(node1, dirs[1], argv), _start(node0, dirs[0], argv)][::-1]
        outs = _finish(procs)
    assert [p.returncode for p in procs] == [0, 0], outs
    every = _assert_one_job(dirs, 1, outs)
    assert {(e["PADDLE_JOB_ID"], e["TORCHELASTIC_RUN_ID"]) for e in every} == {("job1", "job1")}
    for i, d in enumerate(dirs):
        summary = json.loads((d / "log" / "summary.json").read_text())
        assert (summary["job_id"], summary["node_index"], summary["nnodes"]) == ("job1", i, 2)
        assert "rank assigned at the rendezvous" in outs[i][1], outs[i][1]


def test_paddles_rank_and_max_restart_spellings_restart_both_nodes_once(tmp_path):
    dirs = _node_dirs(tmp_path, 2, script=write_worker(tmp_path))
    with netns_cluster(2) as cluster:
        master = f"{cluster.nodes[0].addr}:{PORTS['paddle']}"
        procs = []
        for i, (node, d) in enumerate(zip(cluster.nodes, dirs, strict=True)):
            argv = ["--master", master, "--nnodes", "2", "--rank", str(i),
                    "--nproc_per_node", "1", "--max_restart", "1",
                    "train.py", "--fail", "1", "--fail_rounds", "1"]  # fmt: skip
            procs.append(_start(node, d, argv))
        outs = _finish(procs)
    assert [p.returncode for p in procs] == [0, 0], outs
    for i, d in enumerate(dirs):
        seen = []  # (rank, restart round) of every start of this node's worker
        for line in (d / "log" / "workerlog.0").read_text().splitlines():
            if line.startswith("RANK "):
                _, rank, _, round_ = line.split()
                seen.append((int(rank), int(round_)))
        assert seen == [(i, 0), (i, 1)], (i, outs)
    for i, (_, err) in enumerate(outs):
        assert "restart 1 of 1 after: trainer rank 1 exited with code 3" in err, err
        assert f"node {i} of 2 by --node_rank" in err, err  # --rank is --node_rank


def _refused_on_both(
    tmp_path: Path,
    argv_of: Callable[[int, Node], list[str]],
    env_of: Callable[[int, Node], dict[str, str]] | None = None,
    timeout: float = 15,
) -> list[tuple[int, str, str, float]]:
    """Start both nodes; return (exit code, stdout, stderr, seconds to exit) of each."""
    dirs = _node_dirs(tmp_path, 2)
    with netns_cluster(2) as cluster:
        node0 = cluster.nodes[0]
        started = time.monotonic()
        procs = [
            _start(node, d, argv_of(i, node0), env=env_of(i, node0) if env_of else None)
            for i, (node, d) in enumerate(zip(cluster.nodes, dirs, strict=True))
        ]
        outs = _finish(procs, timeout=timeout)
        took = time.monotonic() - started
    for d in dirs:
        assert not (d / "log").exists(), sorted(d.rglob("*"))
        assert not list((d / "envs").iterdir())  # no worker started
    return [(p.returncode, o, e, took) for p, (o, e) in zip(procs, outs, strict=True)]


@pytest.mark.parametrize(
    ("extra", "pet", "message"),
    [
        (("--logs-specs", "x"), {},
         "paddlike.launch: error: --logs-specs: paddlike's log layout is fixed"),
        ((), {"PET_EVENT_LOG_HANDLER": "console"},
         "paddlike.launch: error: --event_log_handler (from PET_EVENT_LOG_HANDLER): no event "
         "handlers"),
    ],
    ids=["torchrun-flag", "pet-variable"],
)  # fmt: skip
def test_an_option_paddlike_cannot_honour_stops_every_node_naming_it(tmp_path, extra, pet, message):
    def argv(rank: int, node0: Node) -> list[str]:
        return _torchrun_line(rank, node0, PORTS["refused"], "--rdzv_timeout", "60", *extra)

    def env(_: int, __: Node) -> dict[str, str]:
        return _clean_env(**pet)

    for code, out, err, took in _refused_on_both(tmp_path, argv, env):
        assert code == 2, err
        assert err.strip().splitlines() == [err.strip()] and err.startswith(message), err
        assert out == ""
        assert took < 10, f"a node waited {took:.1f} s for the other (rdzv_timeout 60)"
