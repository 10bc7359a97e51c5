"""The global view's pure parts as tables: the uneven split rule, SBP parsing,
placements, regions, shape inference, SBP signatures, boxing safety and transfer plans.
No processes: everything here is arithmetic every rank computes alike."""

from __future__ import annotations

import subprocess
import sys

import pytest

from paddlike.distributed.global_view import signatures as sig
from paddlike.distributed.global_view.boxing import axis_is_safe
from paddlike.distributed.global_view.errors import GlobalViewError
from paddlike.distributed.global_view.placement import placement
from paddlike.distributed.global_view.regions import (
    even_global_shape,
    infer_global_shape,
    local_region,
    split_bounds,
    split_sizes,
)
from paddlike.distributed.global_view.sbp import (
    Split,
    broadcast,
    fmt,
    normalize,
    parse,
    partial_sum,
    split,
)
from paddlike.distributed.global_view.transfer import Move, plan

S0, S1, B, P = Split(0), Split(1), broadcast, partial_sum


@pytest.mark.parametrize(
    ("n", "k", "sizes"),
    [(5, 4, [2, 1, 1, 1]), (4, 2, [2, 2]), (7, 3, [3, 2, 2]), (1, 3, [1, 0, 0]), (0, 2, [0, 0]),
     (9, 1, [9])],
)  # fmt: skip
def test_uneven_split_gives_n_div_k_and_the_first_n_mod_k_parts_one_more(n, k, sizes) -> None:
    assert split_sizes(n, k) == sizes
    bounds = [split_bounds(n, k, i) for i in range(k)]
    assert [hi - lo for lo, hi in bounds] == sizes
    assert bounds[0][0] == 0 and bounds[-1][1] == n
    assert all(bounds[i][1] == bounds[i + 1][0] for i in range(k - 1))


@pytest.mark.parametrize(
    ("text", "want"),
    [("S(0)", S0), ("s1", S1), ("split(dim=2)", Split(2)), ("split(-1)", Split(-1)),
     ("B", B), ("broadcast", B), ("P", P), ("partial_sum", P), (S1, S1)],
)  # fmt: skip
def test_sbp_parses_from_its_objects_and_short_text(text, want) -> None:
    assert parse(text) == want


def test_sbp_prints_like_oneflow_and_short_in_messages() -> None:
    assert repr(split(0)) == "sbp.split(dim=0)" and str(split(0)) == "S(0)"
    assert repr(B) == "sbp.broadcast" and repr(P) == "sbp.partial_sum"
    assert fmt((S0, B)) == "(S(0), B)" and fmt((P,)) == "P"
    assert split(1) == split(1) and split(1) != split(0) and hash(split(1)) == hash(S1)


@pytest.mark.parametrize(
    ("value", "mesh", "ndim", "message"),
    [("X", 1, 2, "'X' is not an SBP"),
     ((S0, B), 1, 2, r"sbp \(S\(0\), B\) has 2 entries, but the placement has 1 axes"),
     (Split(2), 1, 2, "splits dim 2, but the array has 2 dims"),
     (Split(-3), 1, 2, "splits dim -3")],
)  # fmt: skip
def test_bad_sbps_are_refused_naming_the_operation_and_the_sbp(value, mesh, ndim, message):
    with pytest.raises(GlobalViewError, match=message):
        normalize(value, mesh, ndim, "to_global")


def test_negative_split_dims_resolve_against_the_array() -> None:
    assert normalize(Split(-1), 1, 3, "x") == (Split(2),)
    assert normalize([S0, "B"], 2, 2, "x") == (S0, B)


def test_a_2d_placement_knows_each_ranks_coordinates_and_axis_groups() -> None:
    p = placement("cpu", ranks=[[0, 1, 2], [3, 4, 5]])
    assert p.hierarchy == (2, 3) and p.ranks == (0, 1, 2, 3, 4, 5) and p.ndim == 2
    assert p.coords(4) == (1, 1) and p.rank_at((1, 2)) == 5
    assert p.axis_ranks(4, 0) == (1, 4) and p.axis_ranks(4, 1) == (3, 4, 5)
    assert p.parallel_id(3) == 3 and p.parallel_id(9) == -1 and not p.has(9)
    assert repr(p) == 'placement(type="cpu", ranks=[[0, 1, 2], [3, 4, 5]])'
    assert p == placement("cpu", [[0, 1, 2], [3, 4, 5]])
    assert p != placement("cpu", [0, 1, 2, 3, 4, 5]) and p != placement("cuda", p.nested_ranks())
    assert len({p, placement("cpu", [[0, 1, 2], [3, 4, 5]])}) == 1


def test_placement_order_is_parallel_order() -> None:
    p = placement("cpu", ranks=[3, 1])
    assert p.coords(3) == (0,) and p.axis_ranks(1, 0) == (3, 1)


@pytest.mark.parametrize(
    ("kind", "ranks", "message"),
    [("tpu", [0], "type 'tpu' is not one of"), ("cpu", [[0, 1], [2]], "not rectangular"),
     ("cpu", [0, 0], r"ranks \[0\] appear more than once"), ("cpu", [], "ranks is empty"),
     ("cpu", [-1], "negative"), ("cpu", "01", "must be a list of ints"),
     ("cpu", [0, [1]], "mixes ints and lists")],
)  # fmt: skip
def test_bad_placements_are_refused_with_the_reason(kind, ranks, message) -> None:
    with pytest.raises(GlobalViewError, match=message):
        placement(kind, ranks)


def test_two_axes_splitting_one_dim_nest_in_axis_order() -> None:
    # 5 rows: axis 0 gives 3 and 2, axis 1 splits those into 2+1 and 1+1
    regions = {c: local_region((5, 3), (2, 2), (S0, S0), c)[0] for c in
               [(0, 0), (0, 1), (1, 0), (1, 1)]}  # fmt: skip
    assert regions == {(0, 0): (0, 2), (0, 1): (2, 3), (1, 0): (3, 4), (1, 1): (4, 5)}
    assert local_region((5, 4), (2, 2), (S0, S1), (1, 1)) == ((3, 5), (2, 4))
    assert local_region((5, 4), (2, 2), (P, B), (1, 1)) == ((0, 5), (0, 4))


def test_global_shape_is_inferred_from_uneven_pieces() -> None:
    p = placement("cpu", [0, 1, 2, 3])
    shapes = [(2, 3), (1, 3), (1, 3), (1, 3)]
    coords, rank = (lambda i: p.coords(p.ranks[i])), (lambda i: p.ranks[i])
    assert infer_global_shape(shapes, (4,), (S0,), coords, rank, "to_global") == (5, 3)
    assert infer_global_shape([(2, 3)] * 4, (4,), (P,), coords, rank, "to_global") == (2, 3)
    p2 = placement("cpu", [[0, 1], [2, 3]])
    c2 = lambda i: p2.coords(p2.ranks[i])  # noqa: E731
    assert infer_global_shape([(2, 2), (2, 1), (1, 2), (1, 1)], (2, 2), (S0, S1), c2, rank,
                              "x") == (3, 3)  # fmt: skip


def test_without_the_metadata_exchange_the_global_shape_assumes_even_pieces() -> None:
    assert even_global_shape((2, 3), (4,), (S0,)) == (8, 3)
    assert even_global_shape((2, 3), (2, 2), (S0, S0)) == (8, 3)
    assert even_global_shape((2, 3), (2, 2), (S1, P)) == (2, 6)
    with pytest.raises(GlobalViewError, match="splits dim 2, but the local array has 2 dims"):
        even_global_shape((2, 3), (2,), (Split(2),))


@pytest.mark.parametrize(
    ("shapes", "nd", "message"),
    [([(1, 3), (2, 3), (1, 3), (1, 3)], (S0,), r"rank 0 passed a local array of shape \(1, 3\)"),
     ([(2, 3), (2, 3), (2, 3), (2, 4)], (P,), r"rank 3 passed .* \(2, 4\)"),
     ([(2,), (2, 3), (2, 3), (2, 3)], (B,), "different numbers of dims")],
)  # fmt: skip
def test_pieces_that_are_not_the_balanced_split_are_refused_naming_the_rank(shapes, nd, message):
    p = placement("cpu", [0, 1, 2, 3])
    with pytest.raises(GlobalViewError, match=message):
        infer_global_shape(shapes, (4,), nd, lambda i: p.coords(i), lambda i: i, "to_global")


@pytest.mark.parametrize(
    ("x", "w", "out", "boxed"),
    [(S0, B, S0, (S0, B)), (B, S1, S1, (B, S1)), (S1, S0, P, (S1, S0)), (B, B, B, (B, B)),
     (P, B, P, (P, B)), (B, P, P, (B, P)),
     # others box to a legal signature; B -> S is a free slice, so it wins
     (B, S0, P, (S1, S0)), (S1, B, P, (S1, S0)), (S0, S0, P, (S1, S0)), (P, P, P, (P, B))],
)  # fmt: skip
def test_matmul_signature_table(x, w, out, boxed) -> None:
    s = sig.matmul(((x,), 1000), ((w,), 1000), (4,))
    assert s.output == (out,) and s.inputs == ((boxed[0],), (boxed[1],))


def test_matmul_boxes_the_smaller_operand_when_either_would_do() -> None:
    # S(0) @ S(0): gather w to B (S(0) @ B) or turn x into S(1) (S(1) @ S(0)): bytes decide
    s = sig.matmul(((S0,), 10**6), ((S0,), 100), (2,))
    assert s.inputs == ((S0,), (B,)) and s.output == (S0,)
    s = sig.matmul(((S0,), 100), ((S0,), 10**6), (2,))
    assert s.inputs == ((S1,), (S0,)) and s.output == (P,)


@pytest.mark.parametrize(
    ("op", "a", "b", "out", "boxed"),
    [("add", P, P, P, (P, P)), ("mul", P, B, P, (P, B)), ("mul", B, P, P, (B, P)),
     ("add", P, B, B, (B, B)), ("sub", B, P, B, (B, B)), ("add", S0, S0, S0, (S0, S0)),
     ("add", S0, B, S0, (S0, S0)), ("add", P, S0, S0, (S0, S0)), ("mul", P, P, P, (P, B)),
     ("div", P, B, P, (P, B)), ("div", B, P, B, (B, B)), ("add", S0, S1, S0, (S0, S0))],
)  # fmt: skip
def test_elementwise_signature_table(op, a, b, out, boxed) -> None:
    s = sig.elementwise(op, [((4, 3), (a,), 96), ((4, 3), (b,), 96)], (4, 3), (2,))
    assert s.output == (out,) and s.inputs == ((boxed[0],), (boxed[1],))


def test_a_broadcast_operand_follows_the_split_of_the_output() -> None:
    # x (4, 3) S(0) + bias (3,) B: the bias has no dim 0, so it stays B and nothing moves
    s = sig.elementwise("add", [((4, 3), (S0,), 96), ((3,), (B,), 24)], (4, 3), (2,))
    assert s.output == (S0,) and s.inputs == ((S0,), (B,)) and s.cost == 0
    # a scalar never makes P: c + P would add c once per rank
    s = sig.elementwise("add", [((4, 3), (P,), 96), None], (4, 3), (2,))
    assert s.output != (P,) and s.inputs[1] is None
    assert sig.elementwise("mul", [((4, 3), (P,), 96), None], (4, 3), (2,)).output == (P,)


def test_signatures_are_chosen_per_placement_axis() -> None:
    s = sig.matmul(((S0, S1), 10), ((B, S0), 10), (2, 2))
    assert s.output == (S0, P) and s.cost == 0


@pytest.mark.parametrize(
    ("nd", "axes", "keepdims", "out"),
    [((S0,), (0,), False, (P,)), ((S0,), (1,), False, (S0,)), ((S1,), (0,), False, (S0,)),
     ((S1,), (0,), True, (S1,)), ((B,), (0, 1), False, (B,)), ((P,), (1,), False, (P,)),
     ((S0, S1), (1,), False, (S0, P))],
)  # fmt: skip
def test_reductions_over_a_split_axis_give_p(nd, axes, keepdims, out) -> None:
    assert sig.reduce_sbp(nd, 2, axes, keepdims) == out


def test_transpose_and_reshape_follow_the_split_dim() -> None:
    assert sig.transpose_sbp((S0, P), (1, 0)) == (S1, P)
    assert sig.reshape_sbp((4, 6), (4, 2, 3), (S0,)) == (S0,)
    assert sig.reshape_sbp((2, 4, 6), (8, 6), (S1,)) is None
    assert sig.reshape_sbp((2, 4, 6), (2, 4, 3, 2), (S1, B)) == (S1, B)
    assert sig.reshape_sbp((4, 6), (24,), (S0,)) is None


@pytest.mark.parametrize(
    ("src", "dst", "cost"),
    [(P, B, 1000.0), (P, S0, 500.0), (S0, B, 500.0), (S0, S1, 250.0), (B, S0, 0.0),
     (S0, S0, 0.0), (B, P, float("inf"))],
)  # fmt: skip
def test_boxing_costs_are_the_bytes_each_rank_sends(src, dst, cost) -> None:
    assert sig.boxing_cost(src, dst, 1000, 2) == cost


@pytest.mark.parametrize(
    ("cur", "axis", "target", "safe"),
    [((S0, S0), 1, B, True), ((S0, S0), 0, B, False), ((S0, B), 0, B, True),
     ((S0, S1), 0, S1, False), ((P, S0), 0, B, True), ((P, S0), 0, S0, False),
     ((B, S1), 0, S0, True)],
)  # fmt: skip
def test_an_axis_converts_alone_unless_a_later_axis_splits_the_same_dim(cur, axis, target, safe):
    assert axis_is_safe(cur, axis, target) is safe


def test_placement_change_plan_sends_each_piece_once_and_copies_what_a_rank_holds() -> None:
    src, dst = placement("cpu", [0, 1]), placement("cpu", [2])
    assert plan((5, 2), src, (S0,), dst, (B,)) == [
        Move(0, 2, ((0, 3), (0, 2))), Move(1, 2, ((3, 5), (0, 2)))
    ]  # fmt: skip
    same = placement("cpu", [0, 1])
    assert plan((4,), same, (B,), placement("cpu", [1, 0]), (S0,)) == [
        Move(1, 1, ((0, 2),)), Move(0, 0, ((2, 4),))
    ]  # fmt: skip
    # a P destination: the rank at coordinate 0 receives the value, the others hold zeros
    assert plan((4,), src, (S0,), placement("cpu", [2, 3]), (P,)) == [
        Move(0, 2, ((0, 2),)), Move(1, 2, ((2, 4),))
    ]  # fmt: skip


def test_a_world_of_one_runs_the_global_view_without_a_launcher() -> None:
    code = (
        "import numpy as np, paddlike.distributed as dist\n"
        "S, B = dist.sbp.split, dist.sbp.broadcast\n"
        "p = dist.placement('cpu', ranks=[0])\n"
        "try:\n    dist.ones(2, placement=p)\nexcept ValueError as e:\n    print(e)\n"
        "dist.init_parallel_env()\n"
        "x = dist.global_array(np.arange(6.0).reshape(3, 2), placement=p, sbp=S(0))\n"
        "print((x.T @ x).sbp, (x.T @ x).numpy().tolist(), x.sum(0).to_global(sbp=B).sbp)\n"
    )
    env = {k: v for k, v in __import__("os").environ.items()
           if not k.startswith(("PADDLE", "MASTER", "RANK", "WORLD_SIZE"))}  # fmt: skip
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        "ones: the process group is not initialized; call paddlike.distributed."
        'init_parallel_env() before using placement placement(type="cpu", ranks=[0])',
        "(sbp.partial_sum,) [[20.0, 26.0], [26.0, 35.0]] (sbp.broadcast,)",
    ]


def test_a_placement_of_a_kind_the_job_lacks_is_refused_in_plain_words() -> None:
    code = ("import numpy as np, paddlike.distributed as dist\n"
            "dist.init_parallel_env(backend='cpu')\n"
            "dist.global_array(np.ones(4), placement=dist.placement('cuda', [0]), "
            "sbp=dist.sbp.broadcast)\n")  # fmt: skip
    env = {k: v for k, v in __import__("os").environ.items()
           if not k.startswith(("PADDLE", "MASTER", "RANK", "WORLD_SIZE"))}  # fmt: skip
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, env=env)  # fmt: skip
    assert run.returncode != 0
    assert "holds device arrays (cupy), but this job runs only the CPU backend" in run.stderr
    assert "(cupy)s" not in run.stderr and "(numpy)s" not in run.stderr
