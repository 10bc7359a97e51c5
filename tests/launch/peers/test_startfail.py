"""`peers.startfail` and `peers.start_verdict`: where a failing node finds the others in
every form of job, and the verdict it leaves carries its own exit code, so that one cause
ends every node with one code."""

from __future__ import annotations

import pytest

from paddlike.distributed.store import StoreServer
from paddlike.launch.context.options import parse_options
from paddlike.launch.peers import protocol as p
from paddlike.launch.peers.rendezvous_errors import NodeFailedToStart
from paddlike.launch.peers.start_verdict import Meeting, StartFailure
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
