"""context/numa.py: this node's NUMA facts, read from a sysfs laid out in a directory (the
same files the kernel shows: node cpulists, a GPU's numa_node, CPU topology and caches)."""

from __future__ import annotations

from pathlib import Path

import pytest

from paddlike.launch.context.numa import cpu_list_text, parse_cpu_list, read_topology


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def fake_sys(root: Path, gpu_numa: dict[str, str]) -> tuple[Path, Path]:
    """2 nodes x 2 cores x 2 threads (CPU c and c+4 are one core), one L3 per node; the
    driver lists the GPUs `gpu_numa` names (PCI address -> numa_node)."""
    sys_root, gpus = root / "sys", root / "gpus"
    write(sys_root / "devices/system/node/node0/cpulist", "0-1,4-5")
    write(sys_root / "devices/system/node/node1/cpulist", "2-3,6-7")
    write(sys_root / "devices/system/node/node2/cpulist", "")  # memory only
    (sys_root / "devices/system/node/possible").write_text("0-2\n")
    for cpu in range(8):
        base = sys_root / f"devices/system/cpu/cpu{cpu}"
        write(base / "topology/physical_package_id", str(cpu % 4 // 2))
        write(base / "topology/thread_siblings_list", f"{cpu % 4},{cpu % 4 + 4}")
        for index, (level, kind) in enumerate([(1, "Data"), (1, "Instruction"), (3, "Unified")]):
            shared = "0-1,4-5" if cpu % 4 < 2 else "2-3,6-7"
            write(base / f"cache/index{index}/level", str(level))
            write(base / f"cache/index{index}/type", kind)
            write(base / f"cache/index{index}/shared_cpu_list", shared if level == 3 else str(cpu))
    for address, node in gpu_numa.items():
        (gpus / address).mkdir(parents=True)
        write(sys_root / "bus/pci/devices" / address / "numa_node", node)
    return sys_root, gpus


def test_nodes_gpus_sockets_cores_and_caches_are_read(tmp_path):
    sys_root, gpus = fake_sys(tmp_path, {"0000:3b:00.0": "1", "0000:1a:00.0": "0"})
    topo = read_topology(sys_root=str(sys_root), gpus_dir=str(gpus), allowed=range(8))
    assert topo.node_cpus == {0: (0, 1, 4, 5), 1: (2, 3, 6, 7)}  # node 2 has no CPU
    assert topo.gpu_nodes == {"0": 0, "1": 1}  # GPU indices in PCI order
    assert topo.cpu_socket == {0: 0, 1: 0, 2: 1, 3: 1, 4: 0, 5: 0, 6: 1, 7: 1}
    assert topo.cpu_core[5] == 1 and topo.cpu_core[1] == 1
    assert topo.cpu_cache == {c: 0 if c % 4 < 2 else 2 for c in range(8)}
    assert topo.notes == ()


def test_only_the_cpus_the_launcher_may_use_count(tmp_path):
    sys_root, gpus = fake_sys(tmp_path, {})
    topo = read_topology(sys_root=str(sys_root), gpus_dir=str(gpus), allowed={0, 1})
    assert topo.node_cpus == {0: (0, 1)}


@pytest.mark.parametrize(
    ("numa_node", "nodes", "found"),
    [
        ("-1", 2, {}),  # the firmware did not say, and there are two nodes: unknown
        ("-1", 1, {"0": 0}),  # one node: -1 can only be node 0
        ("garbage", 2, {}),
    ],
)
def test_a_gpu_without_a_known_node_is_noted_not_guessed(tmp_path, numa_node, nodes, found):
    sys_root, gpus = fake_sys(tmp_path, {"0000:3b:00.0": numa_node})
    allowed = range(8) if nodes == 2 else (0, 1)
    topo = read_topology(sys_root=str(sys_root), gpus_dir=str(gpus), allowed=allowed)
    assert topo.gpu_nodes == found
    assert bool(topo.notes) == (not found)


def test_without_the_drivers_proc_entries_the_pci_driver_lists_the_gpus(tmp_path):
    sys_root, _ = fake_sys(tmp_path, {})
    (sys_root / "bus/pci/drivers/nvidia/0000:3b:00.0").mkdir(parents=True)
    (sys_root / "bus/pci/drivers/nvidia/bind").write_text("")
    write(sys_root / "bus/pci/devices/0000:3b:00.0/numa_node", "1")
    topo = read_topology(sys_root=str(sys_root), gpus_dir=str(tmp_path / "none"), allowed=range(8))
    assert topo.gpu_nodes == {"0": 1}


def test_a_kernel_without_numa_is_one_node_of_every_cpu(tmp_path):
    topo = read_topology(sys_root=str(tmp_path), gpus_dir=str(tmp_path), allowed={0, 1, 2})
    assert topo.node_cpus == {0: (0, 1, 2)}
    assert "lists no node" in topo.notes[0]


@pytest.mark.parametrize(
    ("text", "cpus"), [("0-3,8,10-11\n", (0, 1, 2, 3, 8, 10, 11)), ("", ()), ("5", (5,))]
)
def test_cpu_lists_read_and_write_as_sysfs_and_numactl_do(text, cpus):
    assert parse_cpu_list(text) == cpus
    assert cpu_list_text(cpus) == text.strip()
