"""Real Paddle scripts run unchanged under `python -m paddlike.launch`.

The environment contract (DESIGN.md) promises that a script written for
`paddle.distributed.launch` needs no change. These tests run Paddle's own
`init_parallel_env`, `fleet.init` and gloo collectives through the real launcher and
check what the user sees: the reduced values in every workerlog.N, the launcher's
exit code, and a prompt, attributed failure when one rank dies.

Paddle is ~0.9 GB, so it lives in a side virtualenv, never in .venv: `make paddle-env`
makes `.venv-paddle` (or point PADDLIKE_PADDLE_PYTHON at any python that has
paddlepaddle and paddlike's dependencies). Without one, every test here skips with the reason.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples"
DEADLINE = 90.0  # a Paddle worker imports for ~3 s; the machine may be busy
# Inherited names that would leak another launcher's job into ours.
DROP = ("PADDLE_", "PADDLIKE_", "FLAGS_selected", "MASTER_", "GLOO_", "NCCL_", "POD_IP")
DROP_EXACT = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK")


def _paddle_python() -> str | None:
    explicit = os.environ.get("PADDLIKE_PADDLE_PYTHON")
    if explicit:
        return explicit
    side = REPO / ".venv-paddle" / "bin" / "python"
    return str(side) if side.exists() else None


def _env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(DROP) and k not in DROP_EXACT and k != "PYTHONPATH"
    }
    env["PYTHONPATH"] = str(REPO)  # this checkout's paddlike, whatever the side venv has
    return env


@pytest.fixture(scope="module")
def paddle_python() -> str:
    python = _paddle_python()
    if python is None:
        pytest.skip(
            "no Paddle interpreter: run `make paddle-env` (makes .venv-paddle) "
            "or set PADDLIKE_PADDLE_PYTHON"
        )
    # find_spec, not import: importing paddle costs ~3 s.
    probe = (
        "import importlib.util as u, sys; "
        "missing = [m for m in ('paddle', 'psutil') if u.find_spec(m) is None]; "
        "import paddlike.launch.main; print(' '.join(missing))"
    )
    try:
        res = subprocess.run(
            [python, "-c", probe], env=_env(), capture_output=True, text=True, timeout=30
        )
    except OSError as exc:
        pytest.skip(f"Paddle interpreter {python} cannot run: {exc}")
    if res.returncode != 0 or res.stdout.strip():
        why = res.stdout.strip() or res.stderr.strip().splitlines()[-1:]
        pytest.skip(f"Paddle interpreter {python} lacks: {why}")
    return python


def run_launcher(python: str, log_dir: Path, script: Path, *options: str):
    """The launcher with `options` (default: two CPU trainers) on `script`."""
    options = options or ("--nproc_per_node", "2")
    cmd = [python, "-m", "paddlike.launch", "--log_dir", str(log_dir), "--kill_timeout", "2"]
    cmd += [*options, str(script)]
    # a TMPDIR of the job's own, removed after it: Paddle's multiprocessing directory
    # (pymp-*, left by workers that end without its clean-up) goes with it. Short: its
    # Manager's socket path must fit AF_UNIX's 107 bytes (the test's tmp_path may not)
    try:
        with tempfile.TemporaryDirectory(prefix="plk-paddle-") as tmp:
            env = {**_env(), "TMPDIR": tmp}
            return subprocess.run(
                cmd, cwd=log_dir.parent, env=env, capture_output=True, text=True,
                timeout=DEADLINE,
            )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        # run() has killed the launcher; its workers die with it (parent-death signal).
        pytest.fail(f"launcher did not finish in {DEADLINE:g} s:\n{exc.stdout}\n{exc.stderr}")


def rank_lines(log: Path) -> list[str]:
    return [ln for ln in log.read_text().splitlines() if ln.startswith("rank ")]


def test_paddle_all_reduce_script_gives_every_rank_the_sum(paddle_python, tmp_path):
    log_dir = tmp_path / "log"
    res = run_launcher(paddle_python, log_dir, EXAMPLES / "paddle_allreduce.py")

    assert res.returncode == 0, res.stdout + res.stderr
    for n in range(2):
        assert rank_lines(log_dir / f"workerlog.{n}") == [
            f"rank {n}/2: paddle all_reduce(SUM) of [{n + 1.0}] -> [3.0]"
        ]
    # The console echoes workerlog.0 (default --tee 0) and ends with the success line.
    assert "rank 0/2: paddle all_reduce(SUM) of [1.0] -> [3.0]" in res.stdout
    assert "OK: 2 workers finished" in res.stdout + res.stderr
    endpoints = (log_dir / "endpoints.log").read_text().splitlines()
    assert endpoints[0] == "PADDLE_TRAINER_ENDPOINTS: " and len(endpoints) == 3


def test_paddle_fleet_data_parallel_step_averages_gradients_across_ranks(paddle_python, tmp_path):
    log_dir = tmp_path / "log"
    res = run_launcher(paddle_python, log_dir, EXAMPLES / "paddle_fleet_dp.py")

    assert res.returncode == 0, res.stdout + res.stderr
    for n in range(2):
        lines = rank_lines(log_dir / f"workerlog.{n}")
        assert lines == [
            f"rank {n}/2: fleet worker_index {n}, worker_num 2, local_rank {n}, node_num 1",
            f"rank {n}/2: averaged gradient [1.5, 1.5, 1.5, 1.5] (expected 1.5 each)",
            f"rank {n}/2: weights identical on all ranks after the step: True",
        ]


GIVE_UP = """
import sys
import paddle
import paddle.distributed as dist
dist.init_parallel_env()
if dist.get_rank() == 1:
    sys.exit(5)  # before the collective: rank 0 is left waiting in gloo
t = paddle.to_tensor([1.0])
dist.all_reduce(t)
print("rank 0 should never get here", t.numpy(), flush=True)
"""


def test_a_paddle_rank_that_dies_ends_the_job_with_its_code_instead_of_a_gloo_hang(
    paddle_python, tmp_path
):
    script = tmp_path / "give_up.py"
    script.write_text(GIVE_UP)
    log_dir = tmp_path / "log"
    res = run_launcher(paddle_python, log_dir, script)

    assert res.returncode == 5, res.stdout + res.stderr
    console = res.stdout + res.stderr
    assert "FAILED: trainer rank 1 exited with code 5" in console
    assert f"{log_dir}/workerlog.1" in console
    assert "should never get here" not in (log_dir / "workerlog.0").read_text()


WHO_AM_I = """
import paddle.distributed as dist
from paddle.distributed import fleet
env = dist.ParallelEnv()
fleet.init(is_collective=True)
print(f"rank {dist.get_rank()} of {dist.get_world_size()}: endpoint {env.current_endpoint}, "
      f"endpoints {','.join(env.trainer_endpoints)}, fleet local_rank {fleet.local_rank()}, "
      f"first worker {fleet.is_first_worker()}", flush=True)
"""


def test_paddle_rank_queries_match_the_endpoints_the_launcher_wrote(paddle_python, tmp_path):
    script = tmp_path / "who_am_i.py"
    script.write_text(WHO_AM_I)
    log_dir = tmp_path / "log"
    res = run_launcher(paddle_python, log_dir, script)

    assert res.returncode == 0, res.stdout + res.stderr
    endpoints = (log_dir / "endpoints.log").read_text().splitlines()[1:]
    for n in range(2):
        assert rank_lines(log_dir / f"workerlog.{n}") == [
            f"rank {n} of 2: endpoint {endpoints[n]}, endpoints {','.join(endpoints)}, "
            f"fleet local_rank {n}, first worker {n == 0}"
        ]


@pytest.mark.netns
def test_paddle_all_reduce_spans_two_nodes_over_their_own_interface(paddle_python, tmp_path):
    """Two namespace nodes: Paddle's TCP store at PADDLE_MASTER on node 0 and gloo pairs
    over GLOO_SOCKET_IFNAME (the interface holding each node's address) must both work."""
    from tests.support.netns import netns_cluster, skip_without_netns

    skip_without_netns()
    script = EXAMPLES / "paddle_allreduce.py"
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        procs = [
            node.popen(
                [paddle_python, "-m", "paddlike.launch", "--ips", "nodea,nodeb",
                 "--nproc_per_node", "2", "--kill_timeout", "2",
                 "--log_dir", str(tmp_path / f"log_{node.hostname}"), str(script)],
                cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                text=True,
            )
            for node in cluster.nodes
        ]  # fmt: skip
        outs = []
        for proc in procs:
            try:
                outs.append(proc.communicate(timeout=DEADLINE)[0])
            except subprocess.TimeoutExpired:
                pytest.fail(f"a launcher did not finish in {DEADLINE:g} s")  # cluster kills all
    assert [p.returncode for p in procs] == [0, 0], "\n".join(outs)
    for host, first in (("nodea", 0), ("nodeb", 2)):
        for n in range(2):
            rank = first + n
            assert rank_lines(tmp_path / f"log_{host}" / f"workerlog.{n}") == [
                f"rank {rank}/4: paddle all_reduce(SUM) of [{rank + 1.0}] -> [10.0]"
            ]


PS_ROLES = """
import paddle
paddle.enable_static()  # Paddle's parameter-server mode is static-graph
from paddle.distributed import fleet
fleet.init()  # PaddleCloudRoleMaker: TRAINING_ROLE, PADDLE_PORT, POD_IP, PADDLE_TRAINER_ID
role = "server" if fleet.is_server() else "trainer"
index = fleet.server_index() if fleet.is_server() else fleet.worker_index()
print(f"role {role} {index}: {fleet.server_num()} server(s), {fleet.worker_num()} trainer(s)",
      flush=True)
if fleet.is_worker():
    # fleet's gloo (PADDLE_WITH_GLOO, PADDLE_GLOO_HTTP_ENDPOINT): without it, a no-op
    total = fleet.util.all_reduce([index + 1.0], "sum", "worker")
    print(f"role trainer {index}: fleet.util.all_reduce -> {[float(v) for v in total]}", flush=True)
"""


def test_paddle_parameter_server_script_finds_its_role_and_reduces_over_fleet_gloo(
    paddle_python, tmp_path
):
    # The PyPI CPU wheel has no PS runtime (no core.DistFleetWrapper), so only what a PS
    # script does before init_server/init_worker can run here: roles and fleet's gloo.
    script = tmp_path / "ps_roles.py"
    script.write_text(PS_ROLES)
    log_dir = tmp_path / "log"
    res = run_launcher(paddle_python, log_dir, script, "--server_num", "1", "--worker_num", "2")

    assert res.returncode == 0, res.stdout + res.stderr
    # Not serverlog.0: with gloo on, server 0 serves the rendezvous inside fleet.init
    # until the trainers are done, and is then stopped by the launcher (as under Paddle's).
    found = {
        ln
        for name in ("workerlog.0", "workerlog.1")
        for ln in (log_dir / name).read_text().splitlines()
        if ln.startswith("role ")
    }
    assert found == {
        "role trainer 0: 1 server(s), 2 trainer(s)",
        "role trainer 1: 1 server(s), 2 trainer(s)",
        "role trainer 0: fleet.util.all_reduce -> [3.0]",
        "role trainer 1: fleet.util.all_reduce -> [3.0]",
    }
