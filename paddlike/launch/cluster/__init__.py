"""One command for the whole cluster: `--hostfile` with `--launcher ssh|pdsh|slurm`.

A layer above the per-node pipeline: it decides which hosts run how many workers
(`hostfile`, `selection`), writes each host's ordinary launcher command (`remote`), starts
those through the tool that already does remote starts (`ssh`, `pdsh`, `srun`), shows
their consoles with a host prefix (`stream`) and ends them together (`start`). Imported by
`launch.main` only when a hostfile or a launcher is given: a plain launch never loads it.
"""
