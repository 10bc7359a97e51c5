"""In-process restarts on 2 namespace nodes (2 ranks each): rank 1 (node a) exits during
step 5 under --max_restarts 1; under `restartable` every other rank is kept, node b's
through the round's watch (another node's failure), and only rank 1 starts anew (a fork of
node a's zygote with --preload); without it every rank starts anew. paddlike's CPU runtime
and torch's gloo."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from paddlike.summary import read_summary
from tests.launch.run.warm.conftest import seen
from tests.support.multinode_common import start_launcher
from tests.support.netns import netns_cluster

pytestmark = [pytest.mark.netns, pytest.mark.timeout(300)]

NO_TORCH = importlib.util.find_spec("torch") is None
RUNTIMES = [
    "paddlike",
    pytest.param("torch", marks=pytest.mark.skipif(NO_TORCH, reason="make torch-env")),
]


def _run(train: Path, how: str, runtime: str, *given: str) -> tuple[str, str]:
    tmp = train.parent
    options = ["--max_restarts", "1", *given]
    args = [str(tmp / "out"), how, runtime]
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        a, b = cluster.nodes
        pa = start_launcher(a, "nodea,nodeb", tmp / "la", train, options=options, script_args=args)
        pb = start_launcher(b, "nodea,nodeb", tmp / "lb", train, options=options, script_args=args)
        out_b = pb.communicate(timeout=240)[0].decode()
        out_a = pa.communicate(timeout=240)[0].decode()
    assert (pa.returncode, pb.returncode) == (0, 0), out_a + out_b
    return out_a, out_b


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_every_rank_but_the_failed_one_is_kept_on_both_nodes(train: Path, runtime: str) -> None:
    out_a, out_b = _run(train, "inside", runtime)
    s = seen(train.parent / "out")
    assert sorted(s) == [f"{r}.{n}" for r in range(4) for n in range(2)]
    for rank in (0, 2, 3):
        assert s[f"{rank}.1"]["pid"] == s[f"{rank}.0"]["pid"], rank
        assert s[f"{rank}.1"]["env"]["MASTER_PORT"] == s["1.1"]["env"]["MASTER_PORT"]
    assert s["1.1"]["pid"] != s["1.0"]["pid"]
    assert f"1 process kept (rank 0, pid {s['0.0']['pid']}), 1 started anew" in out_a
    assert "2 processes kept (rank 2, pid" in out_b and "0 started anew" in out_b
    summary_b = read_summary(train.parent / "lb")
    assert summary_b is not None and summary_b.status == "succeeded"
    (recovery,) = summary_b.recoveries
    assert [k["rank"] for k in recovery["kept"]] == [2, 3] and recovery["started"] == []


def test_without_restartable_every_rank_starts_anew(train: Path) -> None:
    out_a, out_b = _run(train, "plain", "paddlike")
    s = seen(train.parent / "out")
    assert all(s[f"{r}.1"]["pid"] != s[f"{r}.0"]["pid"] for r in range(4))
    assert "kept" not in out_a + out_b


def test_with_preload_the_replacement_is_a_fork_of_its_nodes_zygote(train: Path) -> None:
    out_a, out_b = _run(train, "inside", "paddlike", "--preload", "heavy")
    assert "--preload:" not in out_a + out_b
    s = seen(train.parent / "out")
    assert all(s[f"{r}.1"]["pid"] == s[f"{r}.0"]["pid"] for r in (0, 2, 3))
    assert s["1.1"]["pid"] != s["1.0"]["pid"] and s["1.1"]["preloaded"] is True
