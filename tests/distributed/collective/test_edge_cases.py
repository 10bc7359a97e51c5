"""The collective runtime's edge cases, through the real launcher: corners the
other tests leave out — a barrier a rank leaves, wrongly sized all_gather slots, destroy then
init again, 64 MiB arrays, and the same bits run after run. Worker scripts are written
into the test's directory."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from tests.support.collective_workers.launching import launch, logs, reports


def _script(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


BARRIER_LEAVER = """
    import json, os, sys, time
    import paddlike.distributed as dist
    out_dir, transport, leaver = sys.argv[1], sys.argv[2], int(sys.argv[3])
    dist.init_parallel_env(timeout=60)
    me = dist.get_rank()
    os.environ["PADDLIKE_CPU_TRANSPORT"] = transport
    g = dist.new_group(list(range(dist.get_world_size())), timeout=60)
    dist.barrier(group=g)  # everyone is connected
    if me == leaver:
        os._exit(0)  # gone without a word; exit code 0 so the launcher lets the others run
    start, rep = time.monotonic(), {"rank": me}
    try:
        dist.barrier(group=g)
        rep["error"] = None
    except dist.CollectiveError as exc:
        rep["error"], rep["message"] = type(exc).__name__, str(exc)
    rep["elapsed"] = time.monotonic() - start
    with open(os.path.join(out_dir, f"rank{me}.json"), "w") as f:
        json.dump(rep, f)
    os._exit(0)
"""


@pytest.mark.parametrize("transport", ["auto", "tcp"])
@pytest.mark.parametrize("leaver", [0, 2])
def test_a_barrier_that_a_rank_left_names_that_rank_long_before_the_deadline(
    tmp_path: Path, transport: str, leaver: int
) -> None:
    out = tmp_path / "results"
    out.mkdir()
    script = _script(tmp_path, "leave.py", BARRIER_LEAVER)
    run = launch(tmp_path, script, str(out), transport, str(leaver), nproc=3)
    assert run.returncode == 0, run.stdout + logs(tmp_path)
    got = reports(out)
    assert sorted(got) == sorted({0, 1, 2} - {leaver}), logs(tmp_path)
    for report in got.values():
        assert report["error"] == "PeerExitedError", report
        assert "barrier" in report["message"] and f"rank {leaver}" in report["message"], report
        assert report["elapsed"] < 10, report  # the deadline is 60 s


SMALL_SLOT = """
    import json, os, sys
    import numpy as np
    import paddlike.distributed as dist
    out_dir, transport = sys.argv[1], sys.argv[2]
    dist.init_parallel_env(timeout=20)
    me, n = dist.get_rank(), dist.get_world_size()
    os.environ["PADDLIKE_CPU_TRANSPORT"] = transport
    g = dist.new_group(list(range(n)))
    # Every rank contributes 4 floats, but the slots for the other ranks hold only 3.
    outs = [np.zeros(4 if k == me else 3, np.float32) for k in range(n)]
    rep = {"rank": me}
    try:
        dist.all_gather(outs, np.full(4, me + 1.0, np.float32), group=g)
        rep["error"], rep["outs"] = None, [o.tolist() for o in outs]
    except dist.CollectiveError as exc:
        rep["error"], rep["message"] = type(exc).__name__, str(exc)
    with open(os.path.join(out_dir, f"rank{me}.json"), "w") as f:
        json.dump(rep, f)
"""


@pytest.mark.parametrize(
    "transport",
    [
        "auto",
        "tcp",
    ],
)
def test_all_gather_into_a_slot_smaller_than_the_peers_tensor_is_an_error(
    tmp_path: Path, transport: str
) -> None:
    out = tmp_path / "results"
    out.mkdir()
    script = _script(tmp_path, "slot.py", SMALL_SLOT)
    run = launch(tmp_path, script, str(out), transport, nproc=2)
    assert run.returncode == 0, run.stdout + logs(tmp_path)
    got = reports(out)
    assert sorted(got) == [0, 1], logs(tmp_path)
    for report in got.values():
        assert report["error"] == "CollectiveError", report  # not silently truncated data
        assert "all_gather" in report["message"], report


WRONG_SLOTS = """
    import json, os, sys
    import numpy as np
    import paddlike.distributed as dist
    out_dir, transport, case = sys.argv[1], sys.argv[2], sys.argv[3]
    dist.init_parallel_env(timeout=20)
    me, n = dist.get_rank(), dist.get_world_size()
    os.environ["PADDLIKE_CPU_TRANSPORT"] = transport
    g = dist.new_group(list(range(n)))
    # "large": every rank's slots for the others hold 5 floats where 4 come;
    # "one": only rank 0's slot for rank 1 is wrong (5 floats).
    wrong = case == "large" or me == 0
    outs = [np.full(5 if (k != me and wrong and (case == "large" or k == 1)) else 4, -7.0,
                    np.float32) for k in range(n)]
    rep = {"rank": me}
    try:
        dist.all_gather(outs, np.full(4, me + 1.0, np.float32), group=g)
        rep["error"], rep["outs"] = None, [o.tolist() for o in outs]
    except dist.CollectiveError as exc:
        rep["error"], rep["message"] = type(exc).__name__, str(exc)
    try:  # the group is unusable after the failure, on every rank: no hang, an error
        dist.barrier(group=g)
        rep["after"] = None
    except dist.CollectiveError as exc:
        rep["after"] = type(exc).__name__
    with open(os.path.join(out_dir, f"rank{me}.json"), "w") as f:
        json.dump(rep, f)
"""


@pytest.mark.parametrize(("transport", "case"), [("auto", "large"), ("tcp", "large"),
                                                 ("auto", "one")])  # fmt: skip
def test_all_gather_into_a_slot_larger_than_the_peers_tensor_is_an_error_on_every_rank(
    tmp_path: Path, transport: str, case: str
) -> None:
    out = tmp_path / "results"
    out.mkdir()
    script = _script(tmp_path, "slots.py", WRONG_SLOTS)
    run = launch(tmp_path, script, str(out), transport, case, nproc=3)
    assert run.returncode == 0, run.stdout + logs(tmp_path)
    got = reports(out)
    assert sorted(got) == [0, 1, 2], logs(tmp_path)
    for report in got.values():
        assert report["error"] == "CollectiveError", report  # no stale -7.0 left in a slot
        assert "all_gather" in report["message"], report
    # The wrong slot's own rank gets the same sentence on shared memory and on TCP. In the
    # "large" case every peer's slot is wrong on rank 0: either peer may be named first.
    peers = "[12]" if case == "large" else "1"
    assert re.search(
        rf"all_gather: rank {peers} sent all_gather data of 16 bytes where this rank "
        r"expected all_gather data of 20 bytes",
        got[0]["message"],
    ), got[0]


REINIT = """
    import sys
    import numpy as np
    import paddlike.distributed as dist
    for i in range(int(sys.argv[1])):
        dist.init_parallel_env(timeout=20)
        x = np.full(4, dist.get_rank() + 1.0 + i)
        dist.all_reduce(x)
        expect = sum(range(1, dist.get_world_size() + 1)) + i * dist.get_world_size()
        assert x.tolist() == [expect] * 4, (i, x)
        dist.destroy_process_group()
        assert not dist.is_initialized()
    print("rounds done", flush=True)
"""


def test_destroy_then_init_again_works_round_after_round(tmp_path: Path) -> None:
    script = _script(tmp_path, "reinit.py", REINIT)
    run = launch(tmp_path, script, "30", nproc=3)
    assert run.returncode == 0, run.stdout + logs(tmp_path)
    assert (tmp_path / "log" / "workerlog.0").read_text().count("rounds done") == 1


LARGE = """
    import hashlib, os, sys
    import numpy as np
    import paddlike.distributed as dist
    dist.init_parallel_env(timeout=60)
    me, n = dist.get_rank(), dist.get_world_size()
    os.environ["PADDLIKE_CPU_TRANSPORT"] = "tcp"
    tcp = dist.new_group(list(range(n)))
    os.environ.pop("PADDLIKE_CPU_TRANSPORT")
    count = 16 << 20  # 64 MiB of float32
    base = (np.arange(count, dtype=np.float32) % 1000)
    for name, group in (("shm", None), ("tcp", tcp)):
        x = base * (me + 1)
        dist.all_reduce(x, group=group)
        assert np.array_equal(x, base * (n * (n + 1) // 2)), name
        print(f"{name} 64 MiB exact", flush=True)
    noisy = np.random.default_rng(me).standard_normal(1 << 20).astype(np.float32)
    for name, group in (("shm", None), ("tcp", tcp)):
        y = noisy.copy()
        dist.all_reduce(y, group=group)
        print(f"digest {name} {hashlib.sha256(y.tobytes()).hexdigest()}", flush=True)
    dist.destroy_process_group()
"""


def test_64_mib_all_reduce_is_exact_and_float_sums_are_the_same_bits_in_every_run(
    tmp_path: Path,
) -> None:
    script = _script(tmp_path, "large.py", LARGE)
    digests = []
    for attempt in ("a", "b"):
        run_dir = tmp_path / attempt
        run_dir.mkdir()
        run = launch(run_dir, script, nproc=2)
        assert run.returncode == 0, run.stdout + logs(run_dir)
        per_rank = []
        for rank in (0, 1):
            text = (run_dir / "log" / f"workerlog.{rank}").read_text()
            assert "shm 64 MiB exact" in text and "tcp 64 MiB exact" in text, text
            per_rank.append(sorted(line for line in text.splitlines() if line.startswith("digest")))
        assert per_rank[0] == per_rank[1], per_rank  # every rank has the same bits
        digests.append(per_rank[0])
    assert digests[0] == digests[1], json.dumps(digests)  # and so does the next run


DTYPE_MISMATCH = """
    import json, os, sys
    import numpy as np
    import paddlike.distributed as dist
    out_dir, size = sys.argv[1], int(sys.argv[2])
    dist.init_parallel_env(timeout=20)
    me = dist.get_rank()
    # the same bytes, another dtype: float32 on rank 0, int32 on rank 1
    x = np.full(size, 1.0, np.float32) if me == 0 else np.full(size, 1, np.int32)
    rep = {"rank": me}
    try:
        dist.all_reduce(x)
        rep["error"], rep["result"] = None, x[:4].tolist()
    except dist.CollectiveError as exc:
        rep["error"], rep["message"] = type(exc).__name__, str(exc)
    with open(os.path.join(out_dir, f"rank{me}.json"), "w") as f:
        json.dump(rep, f)
"""


@pytest.mark.parametrize("size", [4, 1 << 20], ids=["one step", "chunked"])
def test_all_reduce_of_another_dtype_with_the_same_bytes_is_an_error_on_both_ranks(
    tmp_path: Path, size: int
) -> None:
    """The user trial: float32 on one rank, int32 of the same size on the other, summed as
    reinterpreted bytes with exit 0. Now both ranks name the dtypes (shared memory)."""
    out = tmp_path / "results"
    out.mkdir()
    script = _script(tmp_path, "dtypes.py", DTYPE_MISMATCH)
    run = launch(tmp_path, script, str(out), str(size), nproc=2)
    assert run.returncode == 0, run.stdout + logs(tmp_path)
    got = reports(out)
    assert sorted(got) == [0, 1], logs(tmp_path)
    assert "passed int32 data where this rank passed float32" in got[0]["message"], got[0]
    assert "passed float32 data where this rank passed int32" in got[1]["message"], got[1]
