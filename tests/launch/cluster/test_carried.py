"""Which of this shell's variables every host is given by prefix (DeepSpeed's EXPORT_ENVS)."""

from __future__ import annotations

import pytest

from paddlike.launch.cluster.carried import DEFAULT_PREFIXES, carried_by_prefix
from paddlike.launch.context.options import UsageError, parse_options

SHELL = {
    "NCCL_SOCKET_IFNAME": "ib0",
    "PYTHONPATH": "/src",
    "UCX_TLS": "rc",
    "MV2_USE_CUDA": "1",
    "MLFLOW_TRACKING_URI": "http://m",
    "HOME": "/home/u",
    "CUDA_VISIBLE_DEVICES": "0",
    "MY_NCCL": "x",  # a prefix, not a substring
}


def test_deepspeeds_prefixes_by_default() -> None:
    assert DEFAULT_PREFIXES == ("NCCL", "PYTHON", "UCX", "MV2", "MLFLOW")
    assert set(carried_by_prefix(SHELL)) == {
        "NCCL_SOCKET_IFNAME", "PYTHONPATH", "UCX_TLS", "MV2_USE_CUDA", "MLFLOW_TRACKING_URI",
    }  # fmt: skip


def test_chosen_prefixes_or_none() -> None:
    assert carried_by_prefix(SHELL, ("HOME", "NCCL")) == {
        "NCCL_SOCKET_IFNAME": "ib0",
        "HOME": "/home/u",
    }
    assert carried_by_prefix(SHELL, ()) == {}


def test_the_option_takes_prefixes_or_none_and_refuses_other_words() -> None:
    assert parse_options(["--export_prefixes", "NCCL,HF_", "t.py"], {}).export_prefixes == (
        "NCCL",
        "HF_",
    )
    assert parse_options(["--export_prefixes", "none", "t.py"], {}).export_prefixes == ()
    with pytest.raises(UsageError, match=r"^--export_prefixes: expected name prefixes"):
        parse_options(["--export_prefixes", "NCCL-X", "t.py"], {})
