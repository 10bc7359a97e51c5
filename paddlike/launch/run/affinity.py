"""--numa_binding applied: in the new worker, before it execs, its CPU affinity
(sched_setaffinity) and its preferred memory node (set_mempolicy, MPOL_PREFERRED).

Done here rather than with a ``numactl`` prefix on the command line, so that binding needs
no tool on the node, the worker's pid and argv stay the script's, and every thread the
script starts inherits both. Preferred, not bound, memory: when the node is full the kernel
takes memory from another node, where numactl's --membind would end the job out of memory.
The policy is best effort (a container's cpuset may forbid the node: the CPUs still
hold); a CPU set the kernel refuses is written into the worker's log, and it runs unbound.
"""

from __future__ import annotations

import os
from collections.abc import Callable

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from paddlike.launch.plan.plan import ProcessSpec

MPOL_PREFERRED = 1
# set_mempolicy's system call number (no libnuma needed); other machines: CPUs only
_SET_MEMPOLICY = {"x86_64": 238, "aarch64": 237, "ppc64le": 261, "s390x": 270}
_MASK_LONGS = 16  # node mask of 16 x 64 bits: nodes 0..1023


def _mempolicy_call(node: int) -> Callable[[], None] | None:
    """set_mempolicy(MPOL_PREFERRED, {node}) prepared in the launcher (ctypes loaded, the
    mask built), so that the child only makes the call; None where it cannot be made."""
    number = _SET_MEMPOLICY.get(os.uname().machine)
    if number is None or not 0 <= node < _MASK_LONGS * 64:
        return None
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    mask = (ctypes.c_ulong * _MASK_LONGS)()
    mask[node // 64] = 1 << (node % 64)
    syscall = libc.syscall

    def call() -> None:
        # maxnode is one more than the bits given, as the kernel counts it
        syscall(number, MPOL_PREFERRED, mask, _MASK_LONGS * 64 + 1)

    return call


def bound_preexec(spec: ProcessSpec, preexec: Callable[[], None]) -> Callable[[], None]:
    """`preexec` preceded by `spec`'s binding (its CPUs, its first NUMA node's memory);
    `preexec` itself for an unbound process."""
    if not spec.cpus:
        return preexec
    cpus = set(spec.cpus)
    prefer = _mempolicy_call(spec.numa_nodes[0]) if spec.numa_nodes else None

    def bind() -> None:
        try:
            os.sched_setaffinity(0, cpus)
        except OSError as exc:  # stderr is the worker's log file by now
            os.write(2, f"paddlike.launch: --numa_binding: CPUs not set ({exc})\n".encode())
        if prefer is not None:
            prefer()
        preexec()

    return bind
