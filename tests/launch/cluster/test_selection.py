"""--include / --exclude / --num_nodes / --num_gpus on the hostfile's hosts (DeepSpeed's)."""

from __future__ import annotations

import pytest

from paddlike.launch.cluster.hostfile import Host
from paddlike.launch.cluster.selection import Pick, parse_filter, select_hosts
from paddlike.launch.context.options import UsageError

HOSTS = (Host("a", 4), Host("b", 4), Host("c", 2), Host("d", None))


@pytest.mark.parametrize(
    ("kwargs", "picks"),
    [
        ({}, (Pick("a", 4), Pick("b", 4), Pick("c", 2), Pick("d", None))),
        ({"include": "c@a"}, (Pick("a", 4), Pick("c", 2))),  # the file's order
        ({"include": "a:0,1@d"}, (Pick("a", None, (0, 1)), Pick("d", None))),
        ({"include": "d:3"}, (Pick("d", None, (3,)),)),  # no slots: any device id
        ({"exclude": "b@d"}, (Pick("a", 4), Pick("c", 2))),
        (
            {"exclude": "a:1,3"},
            (Pick("a", None, (0, 2)), Pick("b", 4), Pick("c", 2), Pick("d", None)),
        ),
        ({"exclude": "c:0,1"}, (Pick("a", 4), Pick("b", 4), Pick("d", None))),  # c emptied
        ({"num_nodes": 2}, (Pick("a", 4), Pick("b", 4))),
        ({"num_gpus": 1}, (Pick("a", 1), Pick("b", 1), Pick("c", 1), Pick("d", 1))),
        ({"num_nodes": 1, "num_gpus": 2}, (Pick("a", 2),)),
    ],
)
def test_the_filters_pick_hosts_and_devices(kwargs, picks) -> None:
    assert select_hosts(HOSTS, **kwargs) == picks


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"include": "a", "exclude": "b"}, "--include/--exclude: give one of them, not both"),
        (
            {"include": "z"},
            r"--include: host 'z' is not in the hostfile hf \(it lists a, b, c, d\)",
        ),
        ({"exclude": "a@z"}, "--exclude: host 'z' is not in the hostfile hf"),
        ({"include": "c:2"}, r"--include: c has slots=2 \(devices 0..1\), got device 2"),
        ({"include": "a:x"}, "--include: expected device ids after 'a:'"),
        ({"include": "@b"}, r"--include: expected host\[:id,id\]@host"),
        ({"exclude": "a@b@c@d"}, "--exclude: no host or device of the hostfile hf is left"),
        ({"exclude": "d:0"}, r"--exclude: d's devices are not known here \(no slots="),
        ({"num_nodes": 5}, "--num_nodes: the hostfile hf lists 4 host"),
        ({"include": "a", "num_gpus": 1}, "--num_gpus: cannot be combined with --include"),
    ],
)
def test_filter_mistakes_name_the_option_and_the_value(kwargs, message) -> None:
    with pytest.raises(UsageError, match=message):
        select_hosts(HOSTS, path="hf", **kwargs)


def test_a_pick_tells_its_launcher_its_devices_or_its_slots() -> None:
    assert Pick("a", None, (0, 2)).launcher_args() == ("--gpus", "0,2")
    assert Pick("a", 3).launcher_args() == ("--slots", "3")  # GPUs 0..2, one each
    assert Pick("a", None).launcher_args() == ()


def test_a_filter_is_hosts_separated_by_at_each_with_optional_device_ids() -> None:
    assert parse_filter("h1:2,0@h2", "--include") == {"h1": (0, 2), "h2": None}


# DeepSpeed's tests/unit/launcher/test_run.py (parse_resource_filter), translated: its
# {host: [slot ids]} are our picks (a whole host keeps its slots; named ids become --gpus)
DS_ONE = (Host("worker-0", 4),)
DS_TWO = (Host("worker-0", 4), Host("worker-1", 4))


@pytest.mark.parametrize(
    ("hosts", "kwargs", "picks"),
    [
        (DS_ONE, {}, (Pick("worker-0", 4),)),
        (DS_ONE, {"exclude": "worker-0:1"}, (Pick("worker-0", None, (0, 2, 3)),)),
        (DS_ONE, {"exclude": "worker-0:1,2"}, (Pick("worker-0", None, (0, 3)),)),
        (DS_ONE, {"include": "worker-0:1"}, (Pick("worker-0", None, (1,)),)),
        (DS_ONE, {"include": "worker-0:1,1"}, (Pick("worker-0", None, (1,)),)),
        (DS_ONE, {"include": "worker-0:1@worker-0:0,1"}, (Pick("worker-0", None, (0, 1)),)),
        (DS_ONE, {"include": "worker-0"}, (Pick("worker-0", 4),)),
        (DS_TWO, {}, (Pick("worker-0", 4), Pick("worker-1", 4))),
        (DS_TWO, {"include": "worker-1:0,3"}, (Pick("worker-1", None, (0, 3)),)),
        (DS_TWO, {"exclude": "worker-1"}, (Pick("worker-0", 4),)),
        (
            DS_TWO,
            {"exclude": "worker-0:0,1@worker-1:3"},
            (Pick("worker-0", None, (2, 3)), Pick("worker-1", None, (0, 1, 2))),
        ),
    ],
)
def test_deepspeeds_resource_filter_cases(hosts, kwargs, picks) -> None:
    assert select_hosts(hosts, **kwargs) == picks


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"include": "jeff"}, "--include: host 'jeff' is not in the hostfile"),
        ({"exclude": "jeff"}, "--exclude: host 'jeff' is not in the hostfile"),
        ({"include": "worker-1:4"}, "--include: worker-1 has slots=4"),
        ({"exclude": "worker-1:4"}, "--exclude: worker-1 has slots=4"),
        ({"exclude": "worker-1@worker-0:1@5"}, "--exclude: host '5' is not in the hostfile"),
        ({"exclude": "worker-0:0,1,2,3@worker-1"}, "--exclude: no host or device"),
        ({"include": "worker-0", "num_nodes": 1}, "--num_nodes: cannot be combined"),
        ({"exclude": "worker-0", "num_gpus": 1}, "--num_gpus: cannot be combined"),
    ],
)
def test_deepspeeds_resource_filter_errors(kwargs, message) -> None:
    with pytest.raises(UsageError, match=message):
        select_hosts(DS_TWO, **kwargs)
