"""The environment API reads the launcher's contract; outside a launch it is a world of one."""

from __future__ import annotations

import subprocess
import sys

import pytest

from paddlike.distributed import env as E

LAUNCHED = {
    "PADDLE_TRAINER_ID": "3",
    "RANK": "3",
    "PADDLE_TRAINERS_NUM": "4",
    "WORLD_SIZE": "4",
    "PADDLE_RANK_IN_NODE": "1",
    "LOCAL_RANK": "1",
    "PADDLE_LOCAL_SIZE": "2",
    "PADDLE_NNODES": "2",
    "PADDLE_CURRENT_ENDPOINT": "198.18.0.2:40124",
    "PADDLE_TRAINER_ENDPOINTS": "198.18.0.1:40123,198.18.0.1:40124,198.18.0.2:40123,"
    "198.18.0.2:40124",
    "PADDLE_MASTER": "198.18.0.1:40100",
    "FLAGS_selected_gpus": "1",
}


def test_launched_worker_sees_its_place_in_the_job() -> None:
    assert E.get_rank(LAUNCHED) == 3
    assert E.get_world_size(LAUNCHED) == 4
    assert E.get_local_rank(LAUNCHED) == 1
    assert E.get_local_world_size(LAUNCHED) == 2
    assert E.get_node_size(LAUNCHED) == 2
    assert E.master_address(LAUNCHED) == ("198.18.0.1", 40100)
    pe = E.ParallelEnv(LAUNCHED)
    assert (pe.rank, pe.world_size, pe.local_rank, pe.nnodes, pe.device_id) == (3, 4, 1, 2, 1)
    assert pe.current_endpoint == "198.18.0.2:40124"
    assert pe.trainer_endpoints[0] == "198.18.0.1:40123" and len(pe.trainer_endpoints) == 4
    assert (pe.nranks, pe.dev_id, pe.trainer_id) == (4, 1, 3)


def test_outside_a_launch_it_is_rank_0_of_a_world_of_one() -> None:
    pe = E.ParallelEnv({})
    assert (pe.rank, pe.world_size, pe.local_rank, pe.local_world_size, pe.nnodes) == (
        0, 1, 0, 1, 1,
    )  # fmt: skip
    assert E.master_address({}) is None


def test_torchrun_names_alone_are_enough() -> None:
    env = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}  # fmt: skip
    assert (E.get_rank(env), E.get_world_size(env), E.get_local_rank(env)) == (1, 2, 1)
    assert E.master_address(env) == ("127.0.0.1", 29500)


def test_node_count_falls_back_to_the_hosts_of_the_endpoints() -> None:
    env = {k: v for k, v in LAUNCHED.items() if k != "PADDLE_NNODES"}
    assert E.get_node_size(env) == 2


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"PADDLE_TRAINER_ID": "one"}, "PADDLE_TRAINER_ID='one' is not an integer"),
        ({"PADDLE_MASTER": "nohostport"}, "PADDLE_MASTER='nohostport' is not host:port"),
        ({"MASTER_ADDR": "h", "MASTER_PORT": "x1"}, "MASTER_PORT='x1' is not a port number"),
    ],
)
def test_malformed_values_are_named(env: dict[str, str], message: str) -> None:
    with pytest.raises(E.EnvironmentContractError, match=message):
        E.get_rank(env)
        E.master_address(env)


def test_rank_outside_the_world_is_refused() -> None:
    with pytest.raises(E.EnvironmentContractError, match="rank 4 is outside the world of 4"):
        E.ParallelEnv({"RANK": "4", "WORLD_SIZE": "4"})


def test_importing_the_package_does_not_load_numpy() -> None:
    # The launcher imports paddlike.distributed.store; numpy must not come with it.
    code = (
        "import sys, paddlike.distributed, paddlike.distributed.store\n"
        "print('numpy' in sys.modules)\n"
        "import paddlike.distributed as d; d.ReduceOp\n"
        "print('numpy' in sys.modules)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["False", "True"]


def test_every_public_name_of_the_package_resolves() -> None:
    import paddlike.distributed as dist

    missing = [name for name in dist.__all__ if getattr(dist, name, None) is None]
    assert missing == []
    assert dist.alltoall is not dist.all_to_all  # Paddle's argument order, its own function


def test_the_lazy_top_level_names_are_exactly_the_collective_and_parallel_api():
    # paddlike.distributed lists its lazy names by hand (importing them eagerly would pull
    # numpy into the launcher); a name added to the API must not be missing there.
    import paddlike.distributed as dist
    from paddlike.distributed import collective, data_parallel, parallel

    owners = {".collective": collective, ".parallel": parallel, ".data_parallel": data_parallel}
    for module, owner in owners.items():
        lazy = {n for n, m in dist._LAZY.items() if m == module}
        assert lazy == set(owner.__all__) - {"BUCKET_BYTES"}, module
    for name, module in dist._LAZY.items():
        assert getattr(dist, name) is getattr(owners[module], name), name
    assert parallel.DataParallel is dist.DataParallel  # Paddle's path keeps working


TORCHRUN = {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
            "MASTER_ADDR": "198.18.0.1", "MASTER_PORT": "29500"}  # fmt: skip


@pytest.mark.parametrize(
    ("environ", "device"),
    [
        (TORCHRUN, 1),  # torchrun / Kubeflow: one GPU per local rank
        ({**TORCHRUN, "LOCAL_RANK": "3"}, 3),
        ({**TORCHRUN, "FLAGS_selected_gpus": "0"}, 0),  # Paddle's variable wins
        ({**TORCHRUN, "FLAGS_selected_gpus": "2,3"}, 2),
        ({}, 0),
    ],
)
def test_the_gpu_is_flags_selected_gpus_else_the_local_rank(environ, device) -> None:
    assert E.ParallelEnv(environ).device_id == device


@pytest.mark.parametrize(
    ("environ", "names", "strict", "result"),
    [
        ({}, ("RANK",), True, 7),
        ({"RANK": " 3 "}, ("RANK",), False, 3),
        ({"A": "", "B": "2"}, ("A", "B"), True, 2),
        ({"RANK": "x", "B": "2"}, ("RANK", "B"), False, 7),
    ],
)
def test_env_int_reads_the_first_variable_set(environ, names, strict, result) -> None:
    assert E.env_int(environ, names, 7, strict=strict) == result


def test_env_int_strict_names_the_variable_that_is_not_an_integer() -> None:
    with pytest.raises(E.EnvironmentContractError, match=r"environment variable RANK='x' is"):
        E.env_int({"RANK": "x"}, ("RANK",), 0)
