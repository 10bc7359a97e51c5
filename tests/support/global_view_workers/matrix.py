"""Worker: the global view against numpy references, run under the launcher with N ranks.

Every conversion among S(0), S(1), B, P (even, uneven, fewer rows than ranks) on a 1-D
placement, n-D placements, to_global from local pieces, matmul signatures, elementwise
ops and reductions, placement changes and the errors. Each rank derives every rank's
data from a seed, so it computes the references itself. Writes $1/rank<r>.json.
"""

from __future__ import annotations

import itertools
import json
import operator
import os
import sys
import traceback
import zlib

import numpy as np

import paddlike.distributed as dist
from paddlike.distributed.global_view.regions import local_region, split_bounds, split_sizes

S, B, P = dist.sbp.split, dist.sbp.broadcast, dist.sbp.partial_sum
failures: list[str] = []
checks = 0


def data(case: str, shape: tuple[int, ...], rank: int = -1, dtype: str = "float64") -> np.ndarray:
    """Small integers (exact sums in any order), the same on every rank for one case."""
    rng = np.random.default_rng(zlib.crc32(repr((case, shape, rank)).encode()))
    return rng.integers(-5, 6, shape).astype(dtype)


def check(name: str, got, want) -> None:
    global checks
    checks += 1
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        failures.append(f"{name}: shape {got.shape}, want {want.shape}")
    elif not (
        np.array_equal(got, want)
        if got.dtype.kind in "biu"
        else np.allclose(got, want, rtol=1e-12, atol=1e-12)
    ):
        failures.append(f"{name}: values differ:\n got {got.tolist()}\nwant {want.tolist()}")


def check_eq(name: str, got, want) -> None:
    global checks
    checks += 1
    if got != want:
        failures.append(f"{name}: got {got!r}, want {want!r}")


def expect_error(name: str, fn, *needles: str) -> None:
    global checks
    checks += 1
    try:
        fn()
    except dist.global_view.GlobalViewError as exc:
        missing = [n for n in needles if n not in str(exc)]
        if missing:
            failures.append(f"{name}: message {str(exc)!r} lacks {missing}")
        return
    except Exception as exc:
        failures.append(f"{name}: raised {type(exc).__name__}: {exc}")
        return
    failures.append(f"{name}: no error raised")


def guarded(name: str, fn) -> None:
    """Run one group of checks; an exception is a failure, not the end of the matrix."""
    try:
        fn()
    except Exception:
        failures.append(f"{name}: {traceback.format_exc()}")


def piece(ref: np.ndarray, p, nd, rank: int) -> np.ndarray:
    region = local_region(ref.shape, p.hierarchy, nd, p.coords(rank))
    return ref[tuple(slice(lo, hi) for lo, hi in region)]


def make(case: str, shape, p, nd):
    """(global array, reference). A P array is built from distinct pieces: the rank at
    coordinate 0 of every P axis holds the value, and each P axis adds noise that sums
    to zero over that axis."""
    me = dist.get_rank()
    ref = data(case, shape)
    if P not in nd:
        return dist.global_array(ref, placement=p, sbp=nd), ref
    coords = p.coords(me)
    full = ref * 0 if any(c for s, c in zip(nd, coords, strict=True) if s is P) else ref.copy()
    for axis, s in enumerate(nd):
        if s is P:
            k, c = p.hierarchy[axis], coords[axis]
            noise = [data(f"{case}/noise{axis}", shape, j) for j in range(k - 1)]
            full = full + (noise[c] if c < k - 1 else -sum(noise, ref * 0))
    as_b = tuple(B if s is P else s for s in nd)
    return dist.to_global(piece(full, p, as_b, me), placement=p, sbp=nd), ref


# --- 1-D: every conversion ------------------------------------------------------------------


def conversions_1d(n: int) -> None:
    p = dist.placement("cpu", ranks=list(range(n)))
    me = dist.get_rank()
    sbps = [S(0), S(1), B, P]
    for shape in [(2 * n, 3 * n), (2 * n + 1, n + 1), (1, 3)]:
        for src, dst in itertools.product(sbps, sbps):
            name = f"1d {shape} {src}->{dst}"
            x, ref = make(f"conv{shape}{src}", shape, p, (src,))
            y = x.to_global(sbp=dst)
            check_eq(f"{name} sbp", y.sbp, (dst,))
            check_eq(f"{name} shape", y.shape, shape)
            if dst is P:
                c = p.coords(me)[0]
                if src is P:
                    want = x.to_local()
                elif src is B:
                    want = ref if c == 0 else np.zeros_like(ref)
                else:
                    want = np.zeros_like(ref)
                    idx = [slice(None)] * 2
                    idx[src.dim] = slice(*split_bounds(shape[src.dim], n, c))
                    want[tuple(idx)] = piece(ref, p, (src,), me)
                check(f"{name} local", y.to_local(), want)
            else:
                check(f"{name} local", y.to_local(), piece(ref, p, (dst,), me))
            check(f"{name} global", y.numpy(), ref)
    # P -> B over 1 MiB runs as reduce_scatter + all_gather when the size divides evenly
    for shape in [(600, 480), (601, 481)]:
        x, ref = make(f"big{shape}", shape, p, (P,))
        x = x.to_global(sbp=P)
        check(f"large P->B {shape}", x.to_global(sbp=B).to_local(), ref)
        check(f"large P->B {shape} leaves its input alone", x.to_global(sbp=B).to_local(), ref)
    # the uneven rule itself, on 5 rows
    x = dist.global_array(np.arange(5 * 2).reshape(5, 2), placement=p, sbp=S(0))
    check_eq("uneven rows", x.to_local().shape[0], split_sizes(5, n)[me])
    # another dtype through every collective
    for src, dst in [(P, B), (P, S(0)), (S(0), B), (S(0), S(1))]:
        x, ref = make(f"int32{src}", (n + 1, 2 * n + 1), p, (src,))
        x = x.to_global(sbp=src)
        y = dist.global_array(ref.astype("int32"), placement=p, sbp=B).to_global(sbp=src)
        check(f"int32 {src}->{dst}", y.to_global(sbp=dst).numpy(), ref.astype("int32"))


# --- n-D placements ---------------------------------------------------------------------------


def conversions_nd(n: int) -> None:
    mesh = {2: [[0, 1]], 3: [[0], [1], [2]], 4: [[0, 1], [2, 3]]}[n]
    p = dist.placement("cpu", ranks=mesh)
    me = dist.get_rank()
    nds = [(S(0), B), (B, S(1)), (S(0), S(1)), (S(1), S(0)), (S(0), S(0)), (B, B), (P, B),
           (B, P), (P, S(1)), (P, P)]  # fmt: skip
    for shape in [(4, 6), (5, 3)]:
        for src, dst in itertools.product(nds, nds):
            name = f"{p.hierarchy} {shape} {src}->{dst}"
            x, ref = make(f"nd{shape}{src}", shape, p, src)
            y = x.to_global(sbp=dst)
            check_eq(f"{name} sbp", y.sbp, dst)
            if P not in dst:
                check(f"{name} local", y.to_local(), piece(ref, p, dst, me))
            check(f"{name} global", y.numpy(), ref)


# --- to_global from local pieces ------------------------------------------------------------


def from_local(n: int) -> None:
    p = dist.placement("cpu", ranks=list(range(n)))
    me = dist.get_rank()
    rows = split_sizes(2 * n + 1, n)
    ref = data("local", (2 * n + 1, 3))
    start = sum(rows[:me])
    x = dist.to_global(ref[start : start + rows[me]], placement=p, sbp=S(0))
    check_eq("to_global S(0) infers the uneven global shape", x.shape, ref.shape)
    check("to_global S(0) global", x.numpy(), ref)
    cols = dist.to_global(ref[:, :1] * 0 + me, placement=p, sbp=S(1))
    check_eq("to_global S(1) shape", cols.shape, (2 * n + 1, n))
    quiet = dist.to_global(np.full((2, 3), me), placement=p, sbp=S(0), check_meta=False)
    check_eq("check_meta=False assumes even pieces", quiet.shape, (2 * n, 3))
    check(
        "check_meta=False global", quiet.numpy(), np.repeat(np.arange(n), 2)[:, None] + 0 * ref[:1]
    )
    given = dist.to_global(ref[start : start + rows[me]], placement=p, sbp=S(0),
                           shape=ref.shape, check_meta=False)  # fmt: skip
    check("check_meta=False with shape= takes uneven pieces", given.numpy(), ref)
    mine = data("local-b", (2, 2), me)
    b = dist.to_global(mine, placement=p, sbp=B)
    check("to_global B takes rank 0's data on every rank", b.to_local(), data("local-b", (2, 2), 0))
    parts = {r: data("local-p", (3,), r) for r in range(n)}
    s = dist.to_global(parts[me], placement=p, sbp=P)
    check("to_global P sums the pieces", s.numpy(), sum(parts.values()))
    check("to_global P keeps the piece", s.to_local(), parts[me])
    # errors every rank sees alike (the shapes and dtypes are gathered first)
    bad = np.zeros((3 if me == n - 1 else 1, 2))
    expect_error("unbalanced pieces", lambda: dist.to_global(bad, placement=p, sbp=S(0)),
                 "to_global", f"{n - 1}: (3, 2)", "n // k")  # fmt: skip
    odd = np.zeros(2, "float32" if me == 1 else "float64")
    expect_error("dtypes disagree", lambda: dist.to_global(odd, placement=p, sbp=B),
                 "to_global", "different dtypes", "float32", "float64")  # fmt: skip
    theirs = S(0) if me == 0 else B
    expect_error("sbps disagree", lambda: dist.to_global(np.zeros(4), placement=p, sbp=theirs),
                 "to_global", "disagree on the placement or sbp")  # fmt: skip
    pb = dist.to_global(np.zeros((2, 2)), placement=p, sbp=P)
    check_eq("P shapes must agree: a P piece is the global shape", pb.shape, (2, 2))


# --- operators --------------------------------------------------------------------------------


def matmul_signatures(n: int) -> None:
    p = dist.placement("cpu", ranks=list(range(n)))
    expected = {("S(0)", "B"): (S(0),), ("B", "S(1)"): (S(1),), ("S(1)", "S(0)"): (P,),
                ("B", "B"): (B,)}  # fmt: skip
    for a, b in itertools.product([S(0), S(1), B, P], repeat=2):
        x, xr = make(f"mm-x{a}", (2 * n + 1, n + 2), p, (a,))
        w, wr = make(f"mm-w{b}", (n + 2, n + 1), p, (b,))
        y = x @ w
        check(f"matmul {a}@{b} value", y.numpy(), xr @ wr)
        want = expected.get((str(a), str(b)))
        if want is not None:
            check_eq(f"matmul {a}@{b} sbp", y.sbp, want)


def elementwise_and_reductions(n: int) -> None:
    p = dist.placement("cpu", ranks=list(range(n)))
    shape = (2 * n + 1, 3)
    xs = {
        "S0": make("ew-a", shape, p, (S(0),)),
        "S1": make("ew-b", shape, p, (S(1),)),
        "B": make("ew-c", shape, p, (B,)),
        "P": make("ew-d", shape, p, (P,)),
        "P2": make("ew-e", shape, p, (P,)),
    }
    table = [
        ("P+P", "P", "P2", "add", (P,)),
        ("P*B", "P", "B", "mul", (P,)),
        ("B*P", "B", "P", "mul", (P,)),
        ("P+B", "P", "B", "add", (B,)),
        ("B-P", "B", "P", "sub", (B,)),
        ("S0+S0", "S0", "S0", "add", (S(0),)),
        ("S0+B", "S0", "B", "add", (S(0),)),
        ("B*S1", "B", "S1", "mul", (S(1),)),
        ("P+S0", "P", "S0", "add", (S(0),)),
        ("S0-S1", "S0", "S1", "sub", (S(0),)),
        ("P/B", "P", "B", "div", (P,)),
    ]
    fns = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}
    for name, a, b, op, want in table:
        (xa, ra), (xb, rb) = xs[a], xs[b]
        if op == "div":
            xb, rb = xb * 0 + 2.0, rb * 0 + 2.0
        y = {"add": operator.add, "sub": operator.sub, "mul": operator.mul,
             "div": operator.truediv}[op](xa, xb)  # fmt: skip
        check_eq(f"{name} sbp", y.sbp, want)
        check(f"{name} value", y.numpy(), fns[op](ra, rb))
    for key, (x, ref) in xs.items():
        check_eq(f"{key}*2 keeps its sbp", (x * 2).sbp, x.sbp)
        check(f"{key}*2 value", (2 * x).numpy(), ref * 2)
        check(f"{key}-x value", (-x).numpy(), -ref)
    xp_, rp = xs["P"]
    # c + P would add c once per rank: P is reduced first, to the cheapest legal SBP
    check_eq("P+2 reduces P first", (xp_ + 2).sbp, (S(0),))
    check("P+2 adds 2 once", (xp_ + 2).numpy(), rp + 2)
    bias = dist.global_array(data("bias", (3,)), placement=p, sbp=B)
    check_eq("S0 + bias(B) stays S0", (xs["S0"][0] + bias).sbp, (S(0),))
    check("S0 + bias value", (xs["S0"][0] + bias).numpy(), xs["S0"][1] + data("bias", (3,)))
    x0, r0 = xs["S0"]
    check_eq("sum over the split axis gives P", x0.sum(0).sbp, (P,))
    check("sum(0) value", x0.sum(0).numpy(), r0.sum(0))
    check_eq("sum over another axis keeps the split", x0.sum(1).sbp, (S(0),))
    check("sum(1) value", x0.sum(1).numpy(), r0.sum(1))
    check_eq("sum keepdims keeps the dim", x0.sum(1, keepdims=True).sbp, (S(0),))
    check_eq("sum of everything is P", x0.sum().sbp, (P,))
    check("sum() value", x0.sum().numpy(), r0.sum())
    check("mean(0) value", x0.mean(0).numpy(), r0.mean(0))
    check_eq("mean(0) sbp", x0.mean(0).sbp, (P,))
    x1, r1 = xs["S1"]
    check_eq("sum(0) of S1 is S(0) of the result", x1.sum(0).sbp, (S(0),))
    check("sum(0) of S1", x1.sum(0).numpy(), r1.sum(0))
    check_eq("P.sum stays P", xs["P"][0].sum(1).sbp, (P,))
    check("P.mean value", xs["P"][0].mean().numpy(), xs["P"][1].mean())
    check_eq("S(0).T is S(1)", x0.T.sbp, (S(1),))
    check("T value", x0.T.numpy(), r0.T)
    r = x0.reshape(shape[0], 3, 1)
    check_eq("reshape keeping the split dim stays S(0)", r.sbp, (S(0),))
    check("reshape value", r.numpy(), r0.reshape(shape[0], 3, 1))
    flat = x0.reshape(-1)
    check_eq("reshape merging the split dim gathers it to B", flat.sbp, (B,))
    check("reshape(-1) value", flat.numpy(), r0.reshape(-1))


def factories(n: int) -> None:
    p = dist.placement("cpu", ranks=list(range(n)))
    me = dist.get_rank()
    o = dist.ones((2 * n + 1, 2), placement=p, sbp=S(0))
    check_eq("ones dtype is float32", o.dtype, np.dtype("float32"))
    check("ones local", o.to_local(), np.ones((split_sizes(2 * n + 1, n)[me], 2)))
    z = dist.zeros(3, 4, placement=p, sbp=S(1))
    check("zeros global", z.numpy(), np.zeros((3, 4)))
    f = dist.full((2, 2), 7, placement=p, sbp=P)
    check("full P global", f.numpy(), np.full((2, 2), 7))
    want = np.full((2, 2), 7 if me == 0 else 0)
    check("full P: zeros away from parallel id 0", f.to_local(), want)
    a = dist.arange(2 * n + 1, placement=p, sbp=S(0))
    check("arange global", a.numpy(), np.arange(2 * n + 1))
    check_eq("arange dtype", a.dtype, np.dtype("int64"))
    r1 = dist.randn(3, 5, placement=p, sbp=S(1), seed=7)
    r2 = dist.randn(3, 5, placement=p, sbp=B, seed=7)
    check("randn: one seed, one value whatever the sbp", r1.numpy(), r2.numpy())
    r3 = dist.randn(4, placement=p, sbp=B)
    check("randn without a seed agrees across ranks", r3.to_global(sbp=P).numpy(), r3.numpy())


def placement_changes(n: int) -> None:
    everyone = dist.placement("cpu", ranks=list(range(n)))
    me = dist.get_rank()
    targets = [
        dist.placement("cpu", ranks=[0]),
        dist.placement("cpu", ranks=[n - 1]),
        dist.placement("cpu", ranks=list(reversed(range(n)))),
        dist.placement("cpu", ranks=[1, 0]),
    ]
    if n == 4:
        targets.append(dist.placement("cpu", ranks=[[3, 1], [2, 0]]))
    shape = (2 * n + 1, n + 2)
    for q, src in itertools.product(targets, [S(0), S(1), B, P]):
        dsts = [S(1), B, P, S(0)] if q.ndim == 1 else [(S(0), B), (P, S(1))]
        for dst in dsts:
            name = f"{everyone}/{src} -> {q}/{dst}"
            x, ref = make(f"move{src}", shape, everyone, (src,))
            y = x.to_global(placement=q, sbp=dst)
            check_eq(f"{name} placement", y.placement, q)
            if q.has(me):
                check(f"{name} global", y.numpy(), ref)
                if q.ndim == 1 and dst is not P:
                    check(f"{name} local", y.to_local(), piece(ref, q, (dst,), me))
            else:
                expect_error(f"{name} outside", y.to_local, "to_local", f"rank {me}")
            back = y.to_global(placement=everyone, sbp=B)
            check(f"{name} and back", back.to_local(), ref)


def errors(n: int) -> None:
    p = dist.placement("cpu", ranks=list(range(n)))
    only0 = dist.placement("cpu", ranks=[0])
    me = dist.get_rank()
    x = dist.global_array(np.ones((4, 3)), placement=p, sbp=S(0))
    y = dist.global_array(np.ones((4, 3)), placement=only0, sbp=B)
    if me != 0:
        expect_error("rank outside the placement computes", lambda: y.sum(),
                     "sum", f"rank {me}", "ranks [0]")  # fmt: skip
        expect_error("rank outside the placement reads", lambda: y.numpy(), "numpy", f"rank {me}")
    expect_error("mismatched placements", lambda: x + y, "add", "different placements",
                 str(p), str(only0))  # fmt: skip
    expect_error("axis out of range", lambda: x.sum(2), "sum", "axis 2", "(4, 3)")
    expect_error("split dim out of range", lambda: x.to_global(sbp=S(2)), "to_global", "dim 2")
    expect_error("sbp per placement axis", lambda: x.to_global(sbp=(S(0), B)),
                 "to_global", "2 entries", "1 axes")  # fmt: skip
    expect_error("matmul shapes", lambda: x @ x, "matmul", "(4, 3)", "do not align")
    beyond = dist.placement("cpu", [0, n])
    expect_error("placement ranks outside the world",
                 lambda: dist.global_array(np.ones(2), placement=beyond, sbp=B),
                 "global_array", f"[{n}]", f"world of {n}")  # fmt: skip
    expect_error("numpy operand", lambda: x + np.ones((4, 3)), "add", "global_array")
    expect_error("not rectangular", lambda: dist.placement("cpu", [[0, 1], [2]]),
                 "not rectangular")  # fmt: skip


def main() -> None:
    out = sys.argv[1]
    dist.init_parallel_env(timeout=60)
    n = dist.get_world_size()
    for name, fn in [("conversions_1d", conversions_1d), ("conversions_nd", conversions_nd),
                     ("from_local", from_local), ("matmul", matmul_signatures),
                     ("elementwise", elementwise_and_reductions), ("factories", factories),
                     ("placement_changes", placement_changes), ("errors", errors)]:  # fmt: skip
        guarded(name, lambda fn=fn: fn(n))
    me = dist.get_rank()
    with open(os.path.join(out, f"rank{me}.json"), "w") as f:
        json.dump({"failures": failures, "checks": checks}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
