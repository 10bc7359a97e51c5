"""Which of this shell's variables every host is given, by name prefix, as DeepSpeed does.

DeepSpeed's multi-node runner carries every variable whose name starts with one of its
prefixes (``EXPORT_ENVS``: MLFLOW, PYTHON, MV2, UCX; its CUDA accelerator's NCCL) to every
host. A DeepSpeed user's PYTHONPATH and NCCL_SOCKET_IFNAME therefore reach the workers
without being named; here too, by default:

    --export_prefixes (not given)   NCCL_*, PYTHON*, UCX_*, MV2_*, MLFLOW_* of this shell
    --export_prefixes NCCL,HF_      only those prefixes
    --export_prefixes none          none: only the env files and --export

This module only chooses the names; `envfile.carried_environment` puts them below the
env files and --export (which win for the same name), and the starters carry the result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

# DeepSpeed's EXPORT_ENVS and its CUDA accelerator's export_envs(), in that order.
# (Its Nebula/AzureML names are left out: they include a storage account's key.)
DEFAULT_PREFIXES = ("NCCL", "PYTHON", "UCX", "MV2", "MLFLOW")


def carried_by_prefix(
    environ: Mapping[str, str], prefixes: Sequence[str] | None = None
) -> dict[str, str]:
    """NAME -> VALUE for this shell's variables whose names start with a prefix (None:
    `DEFAULT_PREFIXES`; empty: none), in the environment's order."""
    chosen = tuple(DEFAULT_PREFIXES if prefixes is None else prefixes)
    if not chosen:
        return {}
    return {name: value for name, value in environ.items() if name.startswith(chosen)}
