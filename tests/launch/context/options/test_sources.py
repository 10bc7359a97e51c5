"""options/sources.py: the five sources of an option's value, first wins, each value
returned with where it came from (a `Source`), never recovered from a message."""

from __future__ import annotations

import pytest

from paddlike.launch.context.options import UsageError, parse_options
from paddlike.launch.context.options.record import (
    FLAG,
    OUR_VARIABLE,
    THEIR_FLAG,
    THEIR_OPTION_VARIABLE,
    THEIR_VARIABLE,
    Source,
)
from paddlike.launch.context.options.sources import PRECEDENCE, candidates, resolve

EVERY_SOURCE = {  # --master from each of the five, the highest first
    FLAG: ("10.0.0.1:1", Source(FLAG, "--master")),
    THEIR_FLAG: ("10.0.0.1:1", Source(THEIR_FLAG, "--rdzv_endpoint")),
    OUR_VARIABLE: ("10.0.0.3:3", Source(OUR_VARIABLE, "PADDLIKE_MASTER")),
    THEIR_OPTION_VARIABLE: ("10.0.0.4:4", Source(THEIR_OPTION_VARIABLE, "PET_RDZV_ENDPOINT")),
}


def test_the_table_is_flag_their_flag_our_variable_their_option_their_variable():
    assert PRECEDENCE == (FLAG, THEIR_FLAG, OUR_VARIABLE, THEIR_OPTION_VARIABLE, THEIR_VARIABLE)


def test_every_source_of_a_value_comes_back_in_the_tables_order():
    env = {"PADDLIKE_NNODES": "3", "PET_NNODES": "4", "PADDLE_ELASTIC_NP": "5"}
    found = candidates("nnodes", "2", None, env)
    assert found == [
        ("2", Source(FLAG, "--nnodes")),
        ("3", Source(OUR_VARIABLE, "PADDLIKE_NNODES")),
        ("4", Source(THEIR_VARIABLE, "PET_NNODES")),
        ("5", Source(THEIR_VARIABLE, "PADDLE_ELASTIC_NP")),
    ]


def test_our_flag_wins_over_our_variable():
    assert resolve("master", "10.0.0.1:1", None, {"PADDLIKE_MASTER": "10.0.0.3:3"}) == (
        "10.0.0.1:1", Source(FLAG, "--master"),
    )  # fmt: skip


@pytest.mark.parametrize("drop", range(1, 4))
def test_the_first_source_present_wins(drop):
    kinds = list(EVERY_SOURCE)[drop:]
    flag = EVERY_SOURCE[FLAG][0] if FLAG in kinds else None
    theirs = next((EVERY_SOURCE[k] for k in (THEIR_FLAG, THEIR_OPTION_VARIABLE) if k in kinds),
                  None)  # fmt: skip
    env = {"PADDLIKE_MASTER": "10.0.0.3:3"} if OUR_VARIABLE in kinds else {}
    assert resolve("master", flag, theirs, env)[1].kind == kinds[0]


def test_our_flag_and_another_launchers_flag_must_agree():
    with pytest.raises(UsageError, match=r"^--master: '10.0.0.9:9' contradicts --rdzv_endpoint"):
        resolve("master", "10.0.0.9:9", EVERY_SOURCE[THEIR_FLAG], {})
    text, source = resolve("master", "10.0.0.1:1", EVERY_SOURCE[THEIR_FLAG], {})
    assert (text, source.label("master")) == ("10.0.0.1:1", "--master (from --rdzv_endpoint)")


def test_nothing_given_is_none():
    assert resolve("master", None, None, {}) is None


@pytest.mark.parametrize(
    ("argv", "env", "start_port_from"),
    [
        (["--start_port", "7000"], {}, "--start_port"),
        ([], {"PADDLIKE_START_PORT": "7000"}, "PADDLIKE_START_PORT"),
        ([], {"PADDLE_START_PORT": "7000"}, "PADDLE_START_PORT"),
        ([], {"PADDLE_PORT": "7000", "TRAINER_PORTS_NUM": "2"}, "PADDLE_PORT"),
    ],
)
def test_the_start_ports_source_is_the_sources_name(argv, env, start_port_from):
    assert parse_options([*argv, "t.py"], env).start_port_from == start_port_from


def test_a_message_names_the_source_it_came_from():
    with pytest.raises(UsageError, match=r"^--nnodes \(from PADDLE_ELASTIC_NP\): expected"):
        parse_options(["t.py"], {"PADDLE_ELASTIC_NP": "many"})
    with pytest.raises(UsageError, match=r"^--dry_run \(from PADDLIKE_DRY_RUN\): expected 1/"):
        parse_options(["t.py"], {"PADDLIKE_DRY_RUN": "maybe"})


def test_paddles_nnodes_and_master_variables_are_its_options_without_paddlecloud():
    o = parse_options(["train.py"], {"PADDLE_NNODES": "2", "PADDLE_MASTER": "192.168.0.1:7000"})
    assert (o.nnodes, o.master) == (2, "192.168.0.1:7000")


def test_paddles_nnodes_is_below_torchruns_and_ours():
    found = candidates("nnodes", None, None, {"PET_NNODES": "3", "PADDLE_NNODES": "2"})
    assert found == [
        ("3", Source(THEIR_VARIABLE, "PET_NNODES")),
        ("2", Source(THEIR_VARIABLE, "PADDLE_NNODES")),
    ]


@pytest.mark.parametrize(("var", "text"), [("PADDLE_NNODES", "x"), ("PADDLE_MASTER", "nohostport")])
def test_a_bad_paddle_nnodes_or_master_names_the_variable(var, text):
    with pytest.raises(UsageError, match=rf"^--\w+ \(from {var}\): expected .*, got '{text}'$"):
        parse_options(["train.py"], {var: text})


def test_under_paddlecloud_nnodes_and_master_are_its_own_not_options():
    env = {
        "PADDLE_TRAINERS": "10.0.0.1,10.0.0.2",
        "PADDLE_TRAINER_ID": "1",
        "PADDLE_NNODES": "2",
        "PADDLE_MASTER": "10.0.0.1:6170",
    }
    o = parse_options(["train.py"], env)
    assert (o.nnodes, o.master) == (None, None)  # context/schedulers.py reads them


def test_in_a_launched_worker_the_launchers_nnodes_and_master_are_not_options():
    env = {"PADDLE_JOB_ID": "j", "PADDLE_NNODES": "2", "PADDLE_MASTER": "10.0.0.1:6170"}
    o = parse_options(["train.py"], {**env, "PADDLIKE_JOB_ID": "j"})
    assert (o.nnodes, o.master) == (None, None)


@pytest.mark.parametrize(
    ("var", "message"),
    [("PADDLIKE_START_METHOD", "--start_method (from PADDLIKE_START_METHOD): expected spawn, "
      "fork or forkserver, got 'bogus'"),
     ("PADDLIKE_LOGS_SPECS", "--logs_specs (from PADDLIKE_LOGS_SPECS): paddlike's log layout"),
     ("PADDLIKE_MONITOR_INTERVAL", "--monitor_interval (from PADDLIKE_MONITOR_INTERVAL): "
      "expected a number of seconds > 0, got 'bogus'"),
     ("PADDLIKE_ENABLE_GPU_LOG", "--enable_gpu_log (from PADDLIKE_ENABLE_GPU_LOG): expected a "
      "boolean (true/false), got 'bogus'"),
     ("PADDLIKE_BIND_CORES_TO_RANK", "--bind_cores_to_rank (from PADDLIKE_BIND_CORES_TO_RANK): "
      "expected 1/true/yes/on, or 0/false/no/off or empty, got 'bogus'")],
)  # fmt: skip
def test_every_other_launchers_option_is_read_from_paddlike_option_too(var, message):
    with pytest.raises(UsageError) as err:
        parse_options(["train.py"], {var: "bogus"})
    assert str(err.value).startswith(message)


def test_paddlike_option_of_another_launchers_option_is_above_its_pet_variable():
    env = {"PADDLIKE_BIND_CORES_TO_RANK": "1", "PADDLIKE_ENABLE_GPU_LOG": "true"}
    o = parse_options(["train.py"], env)
    assert (o.numa_binding, o.gpu_log_interval) == ("exclusive", 30.0)
    o = parse_options(["train.py"], {"PADDLIKE_START_METHOD": "fork", "PET_START_METHOD": "x"})
    assert o.training_script == "train.py"  # PET_START_METHOD's bad value is not read


def test_a_list_of_accepted_values_is_said_once():
    with pytest.raises(UsageError) as err:
        parse_options(["--start_method", "thread", "train.py"], {})
    assert str(err.value) == "--start_method: expected spawn, fork or forkserver, got 'thread'"


def test_a_switch_variable_names_every_word_it_takes():
    with pytest.raises(UsageError) as err:
        parse_options(["train.py"], {"PADDLIKE_DRY_RUN": "maybe"})
    assert str(err.value) == (
        "--dry_run (from PADDLIKE_DRY_RUN): expected 1/true/yes/on, or 0/false/no/off or "
        "empty, got 'maybe'"
    )
    assert parse_options(["train.py"], {"PADDLIKE_DRY_RUN": "on"}).dry_run


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [([], {"PADDLE_RANK": "3"}, "--rank (from PADDLE_RANK): 3 is out of range for 1 node(s)"),
     (["--node_rank", "3"], {}, "--node_rank: 3 is out of range for 1 node(s)"),
     ([], {"PADDLE_DEVICES": "0,1", "PADDLE_SERVER_NUM": "1", "PADDLE_TRAINER_NUM": "1"},
      "--devices (from PADDLE_DEVICES): parameter-server mode runs on CPUs"),
     (["--nproc_per_node", "3"], {"PADDLIKE_GPUS": "0,1"},
      "--nproc_per_node: 3 does not divide the 2 GPUs of --gpus 0,1")],
)  # fmt: skip
def test_the_rules_between_options_name_where_a_value_came_from(argv, env, message):
    with pytest.raises(UsageError) as err:
        parse_options([*argv, "train.py"], env)
    assert str(err.value).startswith(message)
