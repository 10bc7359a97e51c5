"""`peers.startfail` and `peers.start_verdict`: where a failing node finds the others in
every form of job, and the verdict it leaves carries its own exit code, so that one cause
ends every node with one code."""

from __future__ import annotations

import socket
import threading

import pytest

from paddlike.distributed.store import StoreServer
from paddlike.launch.context.options import parse_options
from paddlike.launch.peers import protocol as p
from paddlike.launch.peers.rendezvous_errors import NodeFailedToStart
from paddlike.launch.peers.start_verdict import Meeting, StartFailure, read_spare_verdict
from paddlike.launch.peers.start_verdict import tell_start_failure as tell_verdict
from paddlike.launch.peers.startfail import meeting_of, tell_start_failure
from tests.support.fixed_ports import fixed_ports


@pytest.mark.parametrize(
    ("argv", "env", "meeting"),
    [
        (["--ips", "127.0.0.1,127.0.0.2", "--node_rank", "1"], {},
         Meeting("127.0.0.1:6170", 2, False)),
        (["--server_num", "1", "--trainer_num", "1", "--ips", "127.0.0.1,127.0.0.2",
          "--node_rank", "1"], {}, Meeting("127.0.0.1:6170", 2, False)),  # PS by counts
        (["--server_num", "1", "--trainer_num", "1"],
         {"PADDLE_TRAINERS": "127.0.0.1,127.0.0.2", "PADDLE_TRAINER_ID": "1",
          "POD_IP": "127.0.0.2"}, Meeting("127.0.0.1:6170", 2, False)),  # PaddleCloud
        (["--host", "127.0.0.1", "--servers", "127.0.0.2:7000,127.0.0.1:7000",
          "--workers", "127.0.0.2:7001,127.0.0.1:7001"], {},
         Meeting("127.0.0.2:6170", 2, False)),  # PS lists: the first listed host
        (["--host", "127.0.0.2", "--servers", "127.0.0.2:6170,127.0.0.1:6170",
          "--workers", "127.0.0.2:6171,127.0.0.1:6171"], {},
         Meeting("127.0.0.2:6172", 2, True)),  # 6170, 6171 listed there: moved up past them
        (["--ips", "127.0.0.1"], {}, None),  # one node meets no one
        # torchrun's --master_port P: the launchers at P+1; node 0 may tell at P instead
        (["--nnodes", "2", "--node_rank", "0", "--master_addr", "127.0.0.1", "--master_port",
          "7000"], {}, Meeting("127.0.0.1:7001", 2, True, "127.0.0.1:7000")),
        (["--nnodes", "2", "--node_rank", "1", "--master_addr", "127.0.0.1", "--master_port",
          "7000"], {}, Meeting("127.0.0.1:7001", 2, False)),
    ],
)  # fmt: skip
def test_every_form_of_job_knows_where_the_launchers_meet(argv, env, meeting):
    assert meeting_of(parse_options([*argv, "t.py"], env), env) == meeting


@pytest.mark.parametrize(
    ("verdict", "message", "code"),
    [
        (p.failed_start_verdict("x: missing", 2), "x: missing", 2),
        (p.failed_start_verdict("names: nodec unresolved", 1), "names: nodec unresolved", 1),
        (p.FAILED_START_PREFIX + b"plain: no code", "plain: no code", 2),
    ],
)
def test_a_failed_start_verdict_ends_every_node_with_the_failing_nodes_code(verdict, message, code):
    with pytest.raises(NodeFailedToStart) as caught:
        p.check_verdict(verdict)
    assert (str(caught.value), caught.value.exit_code) == (message, code)


@pytest.mark.timeout(30)
def test_a_node_that_exits_1_tells_the_store_its_code(tmp_path):
    port = fixed_ports(1)
    server = StoreServer("127.0.0.1", port).start()
    try:
        options = parse_options(
            ["--ips", "127.0.0.1,127.0.0.2", "--node_rank", "1", "--master",
             f"127.0.0.1:{port}", "t.py"], {},
        )  # fmt: skip
        told = tell_start_failure(options, {}, "--ips: nodec never resolved", exit_code=1)
        verdict = server.peek(p.complete_key(0))
    finally:
        server.close()
    assert told
    with pytest.raises(NodeFailedToStart, match="nodec never resolved") as caught:
        p.check_verdict(verdict)
    assert caught.value.exit_code == 1


@pytest.mark.timeout(30)
def test_the_verdict_names_the_failing_node_and_passes_node_0s_token():
    """`start_verdict` sees only the narrow record: where they meet, the token, who fails."""
    port = fixed_ports(1)
    server = StoreServer("127.0.0.1", port, token=b"secret").start()
    try:
        failure = StartFailure(
            Meeting(f"127.0.0.1:{port}", 2, False), b"secret", None, 1, "127.0.0.2"
        )
        told = tell_verdict(failure, "train.py: no such file", exit_code=2)
        verdict = server.peek(p.complete_key(0))
    finally:
        server.close()
    assert told
    with pytest.raises(NodeFailedToStart, match=r"node 1, 127\.0\.0\.2.*train\.py: no such file"):
        p.check_verdict(verdict)


@pytest.mark.timeout(30)
def test_node_0_tells_at_its_spare_port_when_another_program_holds_the_launchers_port():
    """A program that is not a store holds the launchers' port: the others, connected to
    it, would never hear; node 0 leaves its verdict at the workers' port, where a waiting
    node looks (`read_spare_verdict`), and stops lingering once that node has read it."""
    taken = fixed_ports(2)
    spare = taken + 1
    meeting = Meeting(f"127.0.0.1:{taken}", 2, True, f"127.0.0.1:{spare}")
    failure = StartFailure(meeting, None, None, 0, "127.0.0.1")
    told: list[bool] = []
    with socket.create_server(("127.0.0.1", taken)):  # accepts, never answers
        read_spare_verdict(("127.0.0.1", spare), None)  # nothing there yet: returns
        teller = threading.Thread(
            target=lambda: told.append(tell_verdict(failure, "--master_port: taken", exit_code=2))
        )
        teller.start()
        try:
            with pytest.raises(NodeFailedToStart) as caught:
                while True:  # each look is bounded (SPARE_LOOK); the teller lingers 5 s at most
                    read_spare_verdict(("127.0.0.1", spare), None)
        finally:
            teller.join(timeout=15)
    assert told == [True]
    assert caught.value.exit_code == 2
    assert "(node 0, 127.0.0.1) could not start: --master_port: taken" in str(caught.value)
