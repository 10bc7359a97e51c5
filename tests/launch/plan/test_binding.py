"""--numa_binding's mapping as tables: given a node's NUMA facts and each worker's GPUs,
the CPUs and memory nodes every worker gets (plan/binding.py), and --virtual_local_rank's
view of the GPUs (plan/placement.py)."""

from __future__ import annotations

import pytest

from paddlike.launch.context.numa import NumaTopology
from paddlike.launch.context.options.record import UsageError
from paddlike.launch.plan.binding import bind_workers


def dgx(gpus_per_node: int = 2) -> NumaTopology:
    """2 sockets x 2 NUMA nodes, 4 cores a node with 2 threads each (CPU c and c+16 share a
    core), one L3 per 2 cores; GPUs spread over the nodes in order."""
    node_cpus = {n: tuple(range(4 * n, 4 * n + 4)) + tuple(range(16 + 4 * n, 20 + 4 * n))
                 for n in range(4)}  # fmt: skip
    cpus = [c for cs in node_cpus.values() for c in cs]
    return NumaTopology(
        node_cpus=node_cpus,
        gpu_nodes={str(g): g // gpus_per_node for g in range(4 * gpus_per_node)},
        cpu_socket={c: (c % 16) // 8 for c in cpus},
        cpu_core={c: c % 16 for c in cpus},
        cpu_cache={c: (c % 16) // 2 * 2 for c in cpus},
    )


def one_per_gpu(n: int) -> list[tuple[str, ...]]:
    return [(str(g),) for g in range(n)]


@pytest.mark.parametrize(
    ("mode", "worker", "cpus", "nodes"),
    [
        ("node", 0, (0, 1, 2, 3, 16, 17, 18, 19), (0,)),
        ("node", 3, (4, 5, 6, 7, 20, 21, 22, 23), (1,)),  # GPU 3 is on node 1
        ("node", 7, (12, 13, 14, 15, 28, 29, 30, 31), (3,)),
        # socket 0 = nodes 0 and 1
        ("socket", 1, (*range(0, 8), *range(16, 24)), (0, 1)),
        ("socket", 5, (*range(8, 16), *range(24, 32)), (2, 3)),
        # exclusive: node 0's 4 cores split between GPUs 0 and 1, threads kept together
        ("exclusive", 0, (0, 1, 16, 17), (0,)),
        ("exclusive", 1, (2, 3, 18, 19), (0,)),
        ("exclusive", 6, (12, 13, 28, 29), (3,)),
        # core-complex: node 0 has two L3s (cores 0-1, cores 2-3)
        ("core-complex", 0, (0, 1, 16, 17), (0,)),
        ("core-complex", 1, (2, 3, 18, 19), (0,)),
    ],
)
def test_each_gpu_worker_is_bound_near_its_gpu(mode, worker, cpus, nodes):
    bindings = bind_workers(mode, one_per_gpu(8), dgx())
    assert (bindings[worker].cpus, bindings[worker].nodes) == (cpus, nodes)


def test_the_home_is_named_after_the_gpu():
    assert bind_workers("node", one_per_gpu(8), dgx())[3].text() == (
        "cpus 4-7,20-23 (GPU 3's NUMA node 1)"
    )


def test_exclusive_gives_the_first_workers_one_core_more_when_cores_do_not_divide():
    topo = dgx(gpus_per_node=3)  # 3 GPUs on node 0's 4 cores
    got = [b.cpus for b in bind_workers("exclusive", one_per_gpu(3), topo)]
    assert got == [(0, 1, 16, 17), (2, 18), (3, 19)]


def test_exclusive_with_more_workers_than_cores_is_refused_naming_the_node():
    topo = dgx(gpus_per_node=8)  # 8 GPUs on node 0's 4 cores
    with pytest.raises(UsageError, match=r"^--numa_binding: exclusive: NUMA node 0 has 4 cores "
                       r"for 8 workers; use --numa_binding node"):  # fmt: skip
        bind_workers("exclusive", one_per_gpu(8), topo)


def test_core_complex_goes_round_robin_when_workers_outnumber_caches():
    topo = dgx(gpus_per_node=4)
    got = [b.cpus for b in bind_workers("core-complex", one_per_gpu(4), topo)]
    assert got == [(0, 1, 16, 17), (2, 3, 18, 19), (0, 1, 16, 17), (2, 3, 18, 19)]


@pytest.mark.parametrize(
    ("nproc", "homes"),
    [
        (1, [0]),
        (2, [0, 2]),
        (4, [0, 1, 2, 3]),
        (8, [0, 0, 1, 1, 2, 2, 3, 3]),  # blocks: neighbours share a node
        (6, [0, 0, 1, 2, 2, 3]),
    ],
)
def test_cpu_workers_are_spread_over_the_nodes_in_blocks(nproc, homes):
    got = bind_workers("node", [()] * nproc, dgx())
    assert [b.nodes[0] for b in got] == homes


def test_cpu_workers_exclusive_split_each_nodes_cores():
    got = [b.cpus for b in bind_workers("exclusive", [()] * 8, dgx())]
    assert got[:2] == [(0, 1, 16, 17), (2, 3, 18, 19)]
    assert all(not set(a) & set(b) for i, a in enumerate(got) for b in got[i + 1 :])


def test_two_nodes_of_one_cpu_each_bind_two_cpu_workers_apart():
    topo = NumaTopology({0: (0,), 1: (1,)}, {}, {0: 0, 1: 0}, {0: 0, 1: 1}, {0: 0, 1: 1})
    assert [(b.cpus, b.nodes) for b in bind_workers("node", [(), ()], topo)] == [
        ((0,), (0,)), ((1,), (1,))]  # fmt: skip


def test_a_worker_with_a_slice_of_gpus_on_two_nodes_gets_both():
    got = bind_workers("node", [("1", "2")], dgx())[0]
    assert got.nodes == (0, 1) and got.home == "GPU 1,2's NUMA nodes 0,1"


def test_bind_core_list_limits_every_choice():
    got = bind_workers("node", one_per_gpu(2), dgx(), core_list=range(0, 2))
    assert [b.cpus for b in got] == [(0, 1), (0, 1)]


@pytest.mark.parametrize(
    ("topo_change", "message"),
    [
        ({"gpu_nodes": {}}, r"GPU 0's NUMA node is unknown"),
        ({"node_cpus": {1: (4, 5)}}, r"GPU 0 is on NUMA node 0, which has no CPU this launcher "
         r"may use"),
    ],
)  # fmt: skip
def test_a_gpu_that_cannot_be_placed_is_refused(topo_change, message):
    with pytest.raises(UsageError, match="^--numa_binding: " + message):
        bind_workers("node", one_per_gpu(1), dgx()._replace(**topo_change))


def test_a_core_list_outside_the_launchers_cpus_is_refused():
    with pytest.raises(UsageError, match=r"^--numa_binding: no CPU left to bind to"):
        bind_workers("node", [()], dgx(), core_list=(99,))
