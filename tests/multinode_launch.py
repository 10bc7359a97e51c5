"""Until main.py routes many-node jobs to `run_multinode`: the same front half as main's
`prepare` (options, node match, devices), then the many-node path. Tests start it as
`python tests/multinode_launch.py [launcher options] script [args]`."""

from __future__ import annotations

import os
import sys

from paddlike.launch import cluster
from paddlike.launch.devices import assign_devices, count_gpus
from paddlike.launch.jobwatch import run_multinode
from paddlike.launch.options import UsageError, parse_options


def main() -> int:
    try:
        options = parse_options(sys.argv[1:], os.environ)
        node = cluster.match_node(options, os.environ)
        devices = assign_devices(
            options.gpus,
            options.nproc_per_node,
            environ=os.environ,
            gpu_count=count_gpus() if options.gpus is not None else 0,
            dry_run=options.dry_run,
        )
    except UsageError as exc:
        print(f"paddlike.launch: error: {exc}", file=sys.stderr)
        return 2
    return run_multinode(options, node, devices, os.environ)


if __name__ == "__main__":
    sys.exit(main())
