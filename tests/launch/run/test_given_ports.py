"""Given ports on one node: --start_port / PADDLE_START_PORT, PaddleCloud's PADDLE_PORT +
TRAINER_PORTS_NUM. The ports from the start are claimed as they are, or refused (exit 2)
naming the port that cannot be used; free ports are not substituted."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from paddlike.launch.context.options import UsageError, parse_options
from paddlike.launch.run.ports import PortTakenError, claim_ports
from tests.support.fixed_ports import fixed_ports

CLAIM = """
import json, sys
from pathlib import Path
from paddlike.launch.run.ports import claim_ports
print(json.dumps(claim_ports(int(sys.argv[2]), 2, "127.0.0.1", registry_dir=Path(sys.argv[1]))),
      flush=True)
sys.stdin.readline()  # hold the claim until told to exit
"""


def _free_run(n: int) -> int:
    """A start port whose n consecutive ports are free and given to no other test."""
    return fixed_ports(n)


def test_the_given_consecutive_ports_are_claimed(tmp_path):
    start = _free_run(3)
    assert claim_ports(start, 3, "127.0.0.1", registry_dir=tmp_path) == (start, start + 1,
                                                                            start + 2)  # fmt: skip
    assert sorted(int(p.name) for p in tmp_path.iterdir() if p.name.isdigit()) == [
        start, start + 1, start + 2
    ]  # fmt: skip


def test_a_port_in_use_is_named_and_is_bad_input(tmp_path):
    start = _free_run(3)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", start + 1))
        busy.listen()
        with pytest.raises(
            PortTakenError,
            match=rf"^--start_port {start}: port {start + 1} on "
            r"127.0.0.1 is in use \(.*\); pick another --start_port",
        ) as info:
            claim_ports(start, 3, "127.0.0.1", registry_dir=tmp_path)  # fmt: skip
    assert info.value.exit_code == 2
    assert not [p for p in tmp_path.iterdir() if p.name.isdigit()]  # nothing half-claimed


def test_a_port_another_launcher_just_claimed_is_refused(tmp_path):
    start = _free_run(3)
    holder = subprocess.Popen([sys.executable, "-c", CLAIM, str(tmp_path), str(start + 1)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert json.loads(holder.stdout.readline()) == [start + 1, start + 2]
        with pytest.raises(PortTakenError, match=rf"port {start + 1} on 127.0.0.1 was just given "
                           "to another launcher's workers"):  # fmt: skip
            claim_ports(start, 2, "127.0.0.1", source="PADDLE_START_PORT", registry_dir=tmp_path)
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)


def test_the_same_launcher_claims_its_ports_again_in_the_next_round(tmp_path):
    start = _free_run(2)
    first = claim_ports(start, 2, "127.0.0.1", registry_dir=tmp_path)
    assert claim_ports(start, 2, "127.0.0.1", registry_dir=tmp_path) == first


def test_paddleclouds_port_count_caps_what_a_node_may_claim(tmp_path):
    with pytest.raises(PortTakenError, match=r"^PADDLE_PORT 7000: this node needs 3 consecutive "
                       r"ports, but only 2 were opened from 7000"):  # fmt: skip
        claim_ports(7000, 3, "127.0.0.1", source="PADDLE_PORT", limit=2, registry_dir=tmp_path)


def test_ports_past_65535_are_refused(tmp_path):
    with pytest.raises(PortTakenError, match="leaves no room for 3 ports"):
        claim_ports(65534, 3, registry_dir=tmp_path)


@pytest.mark.parametrize(
    ("argv", "env", "start", "source", "num"),
    [
        ([], {}, 6070, None, None),
        (["--start_port", "7000"], {}, 7000, "--start_port", None),
        ([], {"PADDLIKE_START_PORT": "7050"}, 7050, "PADDLIKE_START_PORT", None),
        ([], {"PADDLE_START_PORT": "7100"}, 7100, "PADDLE_START_PORT", None),
        ([], {"PADDLE_PORT": "7200", "TRAINER_PORTS_NUM": "4"}, 7200, "PADDLE_PORT", 4),
        ([], {"PADDLE_PORT": "7200"}, 6070, None, None),  # a PS process's own variable alone
        (["--start_port", "7000"], {"PADDLE_PORT": "7200", "TRAINER_PORTS_NUM": "4"}, 7000,
         "--start_port", None),
    ],
)  # fmt: skip
def test_where_the_start_port_comes_from(argv, env, start, source, num):
    o = parse_options([*argv, "t.py"], env)
    assert (o.start_port, o.start_port_from, o.ports_num) == (start, source, num)


def test_bad_paddlecloud_port_variables_are_named():
    with pytest.raises(UsageError, match=r"^TRAINER_PORTS_NUM: expected a positive integer"):
        parse_options(["t.py"], {"PADDLE_PORT": "7200", "TRAINER_PORTS_NUM": "x"})
    with pytest.raises(UsageError, match=r"^--start_port \(from PADDLE_START_PORT\): expected"):
        parse_options(["t.py"], {"PADDLE_START_PORT": "99999"})


ENDPOINT = """
import json, os, sys
with open(os.path.join(sys.argv[1], f"ep.{os.environ['RANK']}.json"), "w") as f:
    json.dump([os.environ["PADDLE_CURRENT_ENDPOINT"], os.environ["MASTER_PORT"]], f)
"""


def _launch(tmp_path, *options: str, env: dict | None = None) -> subprocess.CompletedProcess:
    script = tmp_path / "ep.py"
    script.write_text(ENDPOINT)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PADDLE")}
    cmd = [sys.executable, "-m", "paddlike.launch", "--nproc_per_node", "2", *options]
    cmd += ["--log_dir", str(tmp_path / "log"), str(script), str(tmp_path)]
    return subprocess.run(
        cmd, env={**clean, **(env or {})}, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    ("options", "env"),
    [(("--start_port", "{start}"), {}), ((), {"PADDLE_PORT": "{start}", "TRAINER_PORTS_NUM": "3"})],
)
def test_a_one_node_launch_gives_its_workers_the_given_ports(tmp_path, options, env):
    start = _free_run(3)
    fill = {"start": start}
    done = _launch(
        tmp_path,
        *(o.format(**fill) for o in options),
        env={k: v.format(**fill) for k, v in env.items()},
    )
    assert done.returncode == 0, done.stderr
    got = sorted(json.loads((tmp_path / f"ep.{r}.json").read_text())[0] for r in range(2))
    assert got == [f"127.0.0.1:{start}", f"127.0.0.1:{start + 1}"]
    assert json.loads((tmp_path / "ep.0.json").read_text())[1] == str(start + 2)


def test_a_one_node_launch_whose_given_port_is_taken_starts_nothing(tmp_path):
    start = _free_run(3)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", start + 1))
        busy.listen()
        done = _launch(tmp_path, "--start_port", str(start))
    assert done.returncode == 2, done.stderr
    assert f"port {start + 1}" in done.stderr and "in use" in done.stderr
    assert not list(tmp_path.glob("ep.*.json"))
