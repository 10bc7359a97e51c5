"""The pre-flight check (issue 35): every node and link looked at after the nodes meet
and before any worker starts, so that a sick node is named before it slows or hangs a job.

    limits     the thresholds (`--preflight_limits`), parsed and documented
    nvml       GPU health through NVML (ctypes), behind `GpuSource` (a test's stand-in)
    node       this node's own check: log disk, memory, interface, GPUs
    probe      a link's bandwidth and round trip, for a bounded time (sockets)
    verdict    pure: medians, which node is to blame, the lines every node prints
    preflight  the check over the job's store: figures in, the same verdict everywhere
    gate       the hook the job pipeline calls between the rendezvous and the plan
    matmul     --preflight full with CuPy: a matrix multiply per GPU, in a child Python
    choose     check-only launchers, for the one-command start's spares (`cluster.spares`)

Nothing here imports anything heavy; the launcher imports this package only for jobs
of more than one node (or `--preflight on|full` on one).
"""
