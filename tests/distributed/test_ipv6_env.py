"""The workers read IPv6 hosts in the launcher's environment: endpoints ``[addr]:port``,
MASTER_ADDR bare (``fd00::1``), and the parameter servers' lists; IPv4 reads as before."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from paddlike.distributed import env as E
from paddlike.distributed import nodelist
from paddlike.distributed.envint import EnvironmentContractError
from paddlike.distributed.ps import endpoints
from paddlike.distributed.ps.role import RoleError, role_from_env
from paddlike.distributed.ps.stage import StageRoleError, stage_role_from_env

V6_JOB = {
    "PADDLE_TRAINER_ID": "2",
    "PADDLE_TRAINERS_NUM": "4",
    "PADDLE_CURRENT_ENDPOINT": "[fd00::2]:6171",
    "PADDLE_TRAINER_ENDPOINTS": "[fd00::1]:6170,[fd00::1]:6171,[fd00::2]:6170,[fd00::2]:6171",
    "PADDLE_MASTER": "[fd00::1]:6070",
    "MASTER_ADDR": "fd00::1",
    "MASTER_PORT": "6070",
}


# --- the collective worker's environment -------------------------------------------------


def test_a_worker_of_an_ipv6_job_sees_its_place_and_rank_0s_store() -> None:
    assert E.master_address(V6_JOB) == ("fd00::1", 6070)
    assert E.get_node_size({k: v for k, v in V6_JOB.items() if k != "PADDLE_NNODES"}) == 2
    pe = E.ParallelEnv(V6_JOB)
    assert pe.current_endpoint == "[fd00::2]:6171"
    assert pe.trainer_endpoints[2] == "[fd00::2]:6170" and pe.nnodes == 2


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"PADDLE_MASTER": "[::1]:29500"}, ("::1", 29500)),
        ({"PADDLE_MASTER": "[fe80::1%eth0]:29500"}, ("fe80::1%eth0", 29500)),
        ({"PADDLE_MASTER": "198.18.0.1:29500"}, ("198.18.0.1", 29500)),
        ({"PADDLE_MASTER": "node-0:29500"}, ("node-0", 29500)),
        ({"MASTER_ADDR": "fd00::1", "MASTER_PORT": "29500"}, ("fd00::1", 29500)),
        ({"MASTER_ADDR": "[fd00::1]", "MASTER_PORT": "29500"}, ("fd00::1", 29500)),
    ],
)
def test_rank_0s_store_address_in_every_spelling(env: dict[str, str], expected) -> None:
    assert E.master_address(env) == expected


@pytest.mark.parametrize("raw", ["fd00::1:29500", "fd00::1", "[fd00::1]29500", "[fd00::1:29500"])
def test_an_ipv6_master_without_brackets_or_port_names_the_variable_and_the_form(raw) -> None:
    with pytest.raises(EnvironmentContractError, match=r"PADDLE_MASTER=.*\[fd00::1\]:6170"):
        E.master_address({"PADDLE_MASTER": raw})


def test_the_node_list_form_passes_an_ipv6_node_0_to_the_launcher_in_brackets(monkeypatch) -> None:
    # pytest's own __main__ (xdist's worker: python -c) is no script to re-run
    monkeypatch.setattr(nodelist, "_script_argv", lambda: ["train.py"])
    nodelist._reset()
    try:
        nodelist.machine([{"addr": "fd00::1"}, {"addr": "[fd00::2]"}])
        nodelist.ctrl_port(6170)
        argv = nodelist.launch_argv()
    finally:
        nodelist._reset()
    assert argv[:4] == ["--ips", "fd00::1,fd00::2", "--master", "[fd00::1]:6170"]


# --- the parameter servers' endpoints ------------------------------------------------------


@pytest.mark.parametrize(
    ("endpoint", "ok"),
    [("[fd00::1]:6170", True), ("198.18.0.1:6170", True), ("node-0:6170", True),
     ("fd00::1:6170", False), ("[fd00::1]", False), ("[fd00::1]:x", False), (":6170", False)],
)  # fmt: skip
def test_an_endpoint_is_a_host_and_a_port_an_ipv6_host_bracketed(endpoint: str, ok: bool) -> None:
    assert endpoints.well_formed(endpoint) is ok


def test_zeromq_addresses_bracket_ipv6_and_resolve_names_now() -> None:
    assert endpoints.tcp_address("[::1]:6170") == "tcp://[::1]:6170"
    assert endpoints.tcp_address("127.0.0.1:6170") == "tcp://127.0.0.1:6170"
    assert endpoints.tcp_address("localhost:6170") in ("tcp://127.0.0.1:6170", "tcp://[::1]:6170")
    assert endpoints.is_ipv6_address("tcp://[::1]:6170")
    assert not endpoints.is_ipv6_address("tcp://127.0.0.1:6170")
    assert endpoints.same("[fd00:0::1]:80", "[fd00::1]:80")
    assert not endpoints.same("[fd00::1]:80", "[fd00::1]:81")


@pytest.fixture
def ps_env() -> Iterator[dict[str, str]]:
    yield {
        "PADDLE_PSERVERS_IP_PORT_LIST": "[fd00::1]:6170,[fd00::2]:6170",
        "PADDLE_TRAINER_ENDPOINTS": "[fd00::1]:6171,[fd00::2]:6171",
        "PADDLE_TRAINERS_NUM": "2",
        "PADDLIKE_NODE_HOSTS": "fd00::1,fd00::2",
    }


def test_a_server_finds_itself_by_its_bare_pod_ip_among_bracketed_endpoints(ps_env) -> None:
    env = dict(ps_env, TRAINING_ROLE="PSERVER", POD_IP="fd00::2", PADDLE_PORT="6170")
    role = role_from_env(env)
    assert role.server_index == 1 and role.endpoint == "[fd00::2]:6170"
    assert role.job_hosts == ("fd00::1", "fd00::2")


def test_an_unbracketed_ipv6_server_endpoint_is_refused_naming_the_form(ps_env) -> None:
    env = dict(ps_env, TRAINING_ROLE="TRAINER", PADDLE_TRAINER_ID="0",
               PADDLE_PSERVERS_IP_PORT_LIST="fd00::1:6170")  # fmt: skip
    with pytest.raises(RoleError, match=r"'fd00::1:6170' is not host:port.*\[fd00::1\]:6170"):
        role_from_env(env)


def test_a_heter_trainer_finds_its_ipv6_endpoint_in_its_stage() -> None:
    env = {
        "TRAINING_ROLE": "HETER_TRAINER",
        "STAGE_NUM": "2",
        "STAGE_ID": "2",
        "POD_IP": "fd00::3",
        "PADDLE_PORT": "6172",
        "PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST": "[fd00::3]:6172,[fd00::4]:6172",
        "PADDLE_TRAINER_ENDPOINTS": "[fd00::1]:6171",
    }
    role = stage_role_from_env(env)
    assert (role.index, role.endpoint, role.previous) == (0, "[fd00::3]:6172", ("[fd00::1]:6171",))
    with pytest.raises(StageRoleError, match=r"is not host:port"):
        stage_role_from_env(dict(env, PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST="fd00::3:6172"))
