"""The verdict as tables: medians, which node is to blame, the lines every node prints.
Pure functions: every node computes the same verdict from the same figures."""

from __future__ import annotations

import pytest

from paddlike.launch.health.limits import Limits
from paddlike.launch.health.probe import LinkFigure
from paddlike.launch.health.verdict import (
    NodeReport,
    judge,
    median,
    pair_figures,
    rate,
    reference,
    targets,
)

FAST, SLOW = 1.1e9, 38e6  # bytes/s
RTT = 50e-6


def ring_reports(n: int, slow_nodes=(), slow_links=(), rtt_of=None) -> list[NodeReport]:
    """Every node's links to its targets, fast unless a node or a link is slow."""
    reports = []
    for i in range(n):
        links = []
        for j in targets(i, n):
            slow = i in slow_nodes or j in slow_nodes or {i, j} in [set(x) for x in slow_links]
            bw = SLOW if slow else FAST
            rtt = rtt_of(i, j) if rtt_of else RTT
            links.append(LinkFigure(i, j, bw, bw, rtt))
        reports.append(NodeReport(i, f"198.18.0.{i + 1}", tuple(links)))
    return reports


@pytest.mark.parametrize(
    ("values", "expected"),
    [([], 0.0), ([3.0], 3.0), ([5.0, 1.0, 3.0], 3.0), ([4.0, 1.0, 3.0, 2.0], 2.5)],
)
def test_median(values, expected):
    assert median(values) == expected


@pytest.mark.parametrize(
    ("index", "n", "peers"),
    [(0, 1, ()), (0, 2, (1,)), (1, 2, (0,)), (2, 3, (0, 1)), (0, 8, (1, 2)), (7, 8, (0, 1)),
     (1023, 1024, (0, 1))],
)  # fmt: skip
def test_each_node_measures_two_peers_whatever_the_jobs_size(index, n, peers):
    assert targets(index, n) == peers


@pytest.mark.parametrize("n", [3, 4, 8, 16])
def test_one_slow_node_is_named_with_its_figure_and_its_neighbours_are_not(n):
    slow = n - 1
    v = judge(ring_reports(n, slow_nodes=[slow]), Limits())
    assert v.bad_nodes == (slow,)
    assert v.bad_links == ()
    assert len(v.lines) == 1
    assert v.lines[0].startswith(f"node {slow} (198.18.0.{slow + 1}): 38 MB/s to node ")
    assert v.lines[0].endswith(", median 1.1 GB/s")


@pytest.mark.parametrize("n", [3, 4, 8])
def test_one_slow_link_between_healthy_nodes_names_the_link_in_a_note_not_a_node(n):
    v = judge(ring_reports(n, slow_links=[(0, 1)]), Limits())
    assert v.ok and v.bad_nodes == () and v.lines == ()
    assert v.bad_links == ((0, 1),)
    assert v.notes == (
        "the link node 0 (198.18.0.1) - node 1 (198.18.0.2): 38 MB/s to node 1, median 1.1 GB/s"
        " (neither end is slow on its other links)",
    )


def test_a_neighbours_slow_link_to_the_node_at_fault_does_not_count_against_it():
    """4 nodes, node 3 slow; node 1's link to node 2 happened to be slow too (a busy CPU):
    node 1 then has 2 slow links of 3, but its link to node 3 is node 3's fault."""
    reports = ring_reports(4, slow_nodes=[3], slow_links=[(1, 2)])
    v = judge(reports, Limits())
    assert v.bad_nodes == (3,)
    assert v.bad_links == ((1, 2),)  # named in a note
    assert len(v.lines) == 1 and v.lines[0].startswith("node 3 (198.18.0.4): 38 MB/s")


def test_a_two_node_job_has_one_link_and_names_no_node():
    v = judge(ring_reports(2, slow_nodes=[1]), Limits())
    assert v.bad_nodes == ()  # the one link is its own median: nothing to compare with


def test_the_median_is_of_each_nodes_best_link_so_a_slow_node_does_not_move_it():
    pairs = pair_figures(ring_reports(3, slow_nodes=[2]))  # 2 of the 3 links are slow
    assert sorted(f.bandwidth for f in pairs.values()) == [SLOW, SLOW, FAST]
    assert reference(pairs) == (FAST, RTT)


def test_a_pair_measured_twice_counts_its_better_measurement():
    reports = ring_reports(4)
    noisy = reports[0].links[1]._replace(up=1e6)  # 0 -> 2 once slow; 2 -> 0 fast
    reports[0] = reports[0]._replace(links=(reports[0].links[0], noisy))
    assert judge(reports, Limits()).ok


def test_a_slow_round_trip_is_named_when_over_4x_the_median_and_over_the_floor():
    slow_rtt = lambda i, j: 12e-3 if 3 in (i, j) else RTT  # noqa: E731
    v = judge(ring_reports(5, rtt_of=slow_rtt), Limits())
    assert v.bad_nodes == (3,)
    assert v.lines[0].startswith("node 3 (198.18.0.4): round trip 12 ms to node ")
    assert v.lines[0].endswith("median 0.05 ms")
    under_floor = lambda i, j: 0.5e-3 if 3 in (i, j) else RTT  # noqa: E731  (10x, but 0.5 ms)
    assert judge(ring_reports(5, rtt_of=under_floor), Limits()).ok


def test_thresholds_are_settable():
    reports = ring_reports(4, slow_nodes=[1])
    assert not judge(reports, Limits()).ok
    assert judge(reports, Limits(bandwidth=0.01)).ok  # 38 MB/s is over 1% of 1.1 GB/s


def test_a_slow_node_hidden_by_loosened_limits_is_still_seen_in_the_healthy_line():
    from paddlike.launch.health.gate import healthy_line
    from paddlike.launch.health.verdict import hidden_by_limits

    reports = ring_reports(4, slow_nodes=[1])
    loose = Limits(bandwidth=0.01)
    hidden = hidden_by_limits(reports, loose)
    assert hidden.startswith("slowest link node ") and "(198.18.0.2)" in hidden
    assert hidden.endswith("38 MB/s to node 1, median 1.1 GB/s, passed only by --preflight_limits")
    line = healthy_line(judge(reports, loose), 4, 0.3, hidden)
    assert line.startswith("pre-flight check: 4 nodes healthy; links median 1.1 GB/s, round ")
    assert f"; {hidden} (0.30 s)" in line
    assert hidden_by_limits(reports, Limits()) == ""  # the defaults hide nothing
    assert hidden_by_limits(ring_reports(4), loose) == ""  # nothing slow to hide


def test_an_unreachable_peer_is_a_link_with_no_answer():
    reports = ring_reports(4)
    dead = [LinkFigure(f.a, f.b, 0.0, 0.0, float("inf")) for f in reports[2].links]
    reports[2] = reports[2]._replace(links=tuple(dead))
    for i in (0, 1):  # nodes 0 and 1 measure to node 2 (ring and shifted ring)
        reports[i] = reports[i]._replace(links=tuple(
            LinkFigure(f.a, f.b, 0.0, 0.0, float("inf")) if f.b == 2 else f
            for f in reports[i].links))  # fmt: skip
    v = judge(reports, Limits())
    assert v.bad_nodes == (2,)
    assert "no answer from node" in v.lines[0]


def test_node_problems_and_a_missing_gpu_name_the_node():
    reports = ring_reports(4)
    reports = [r._replace(gpus=8) for r in reports]
    reports[1] = reports[1]._replace(gpus=7)
    reports[3] = reports[3]._replace(problems=("GPU 2: 1 uncorrectable ECC error",))
    v = judge(reports, Limits())
    assert v.bad_nodes == (1, 3)
    assert v.lines == (
        "node 3 (198.18.0.4): GPU 2: 1 uncorrectable ECC error",
        "node 1 (198.18.0.2): 7 GPUs, median 8",
    )


def test_rates_read_like_the_report():
    assert [rate(x) for x in (38e6, 1.1e9, 379e6, 2.5e3, 12)] == [
        "38 MB/s", "1.1 GB/s", "379 MB/s", "2.5 kB/s", "12 B/s"]  # fmt: skip


def test_a_node_whose_cpus_are_busy_is_not_blamed_for_its_links():
    """Node 1 moves only 150 MB/s even to itself (its CPUs are taken): its links at 110 MB/s
    are its CPUs' figure, not the links'. A throttled node moves 300 MB/s to itself and
    38 MB/s to the others: its links are slow."""
    busy = ring_reports(5, slow_nodes=[1])
    busy = [r._replace(loop=150e6 if r.index == 1 else 2e9) for r in busy]
    busy = [r._replace(links=tuple(f._replace(up=110e6, down=110e6) if 1 in (f.a, f.b) else f
                                   for f in r.links)) for r in busy]  # fmt: skip
    assert judge(busy, Limits()).ok
    throttled = [r._replace(loop=300e6 if r.index == 1 else 2e9)
                 for r in ring_reports(5, slow_nodes=[1])]  # fmt: skip
    assert judge(throttled, Limits()).bad_nodes == (1,)
