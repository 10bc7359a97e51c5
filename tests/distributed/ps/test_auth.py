"""Parameter servers serve the job's peers only: its hosts and, with a job token, its holders."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from paddlike.distributed import ps
from paddlike.distributed.ps import auth, wire
from paddlike.distributed.ps.client import Client, PsAuthError, PsTimeoutError
from paddlike.distributed.ps.wire import Message, Op, Status
from tests.support.ps_workers.cluster import WORKERS, base_env, free_ports, kill, start_server

TOKEN = "job-secret-17"

# One peer of a PS job as its own process: `peer ENDPOINT MODE [DIR]`, credentials from
# its environment. `use` declares table w (4 floats, SGD lr 1), pushes ones and prints
# the values; `check` prints the values and stops the server; `attack` tries HELLO,
# SAVE to DIR and PUSH, each on a fresh connection with the project's own client, then
# SAVE on a raw socket with no credentials at all, and prints what happened to each.
PEER = r"""
import json, os, sys, time
import numpy as np, zmq
from paddlike.distributed import ps
from paddlike.distributed.ps import auth, wire
from paddlike.distributed.ps.client import Client, PsError
from paddlike.distributed.ps.wire import Message, Op

endpoint, mode = sys.argv[1], sys.argv[2]
spec = ps.TableSpec("w", "dense", (4,), ps.SGD(lr=1.0).config(), ps.Constant().config(), "async")
if mode in ("use", "check"):
    c = Client([endpoint], 0, 30)
    c.call([(0, Message(Op.HELLO, arg0=1, arg1=1))], probe=False)
    if mode == "use":
        c.call([(0, Message(Op.DECLARE, text=spec.to_json()))])
        c.call([(0, Message(Op.PUSH_DENSE, text="w", arrays=[np.ones(4, "f4")]))])
    values = c.call([(0, Message(Op.PULL_DENSE, text="w"))])[0].array(0)
    if mode == "check":
        c.call([(0, Message(Op.STOP))])
    print(json.dumps(values.tolist()))
    c.close()
    sys.exit(0)
out = {}
requests = {
    "HELLO": Message(Op.HELLO, arg0=1, arg1=1),
    "SAVE": Message(Op.SAVE, text=json.dumps({"dir": sys.argv[3]})),
    "PUSH": Message(Op.PUSH_DENSE, text="w", arrays=[np.full(4, 100.0, "f4")]),
}
for name, msg in requests.items():
    c = Client([endpoint], 0, 10)
    start = time.monotonic()
    try:
        c.call([(0, msg)], probe=False)
        out[name] = {"refused": False}
    except PsError as exc:
        out[name] = {"refused": True, "error": str(exc), "seconds": time.monotonic() - start}
    c.close()
ctx = zmq.Context()
raw = ctx.socket(zmq.DEALER)
raw.linger = 0
raw.sndtimeo = 5000  # the refusal may come before the send: no peer then, and no wait for one
raw.connect(f"tcp://{endpoint}")
try:
    raw.send_multipart(wire.encode(requests["SAVE"]))
    out["raw SAVE"] = {"refused": not raw.poll(1000)}
except zmq.Again:
    out["raw SAVE"] = {"refused": True}
raw.close()
ctx.term()
print(json.dumps(out))
"""


def peer(env: dict[str, str], endpoint: str, mode: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", PEER, endpoint, mode, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def run_peer(env: dict[str, str], endpoint: str, mode: str, *args: str) -> object:
    done = peer(env, endpoint, mode, *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def job_env(server_ep: str, trainer_ep: str, token: str | None) -> dict[str, str]:
    env = base_env([server_ep], [trainer_ep])
    env.pop("PADDLIKE_JOB_TOKEN", None)
    if token:
        env["PADDLIKE_JOB_TOKEN"] = token
    return env


@contextlib.contextmanager
def token_client(endpoint: str, env: dict[str, str]) -> Iterator[zmq.Socket]:
    """A raw DEALER socket that proves the job's token to the server at `endpoint`."""
    ctx = zmq.Context()
    try:
        sock = ctx.socket(zmq.DEALER)
        sock.linger = 0
        auth.secure_client(sock, auth.Policy.from_env(env))
        sock.connect(f"tcp://{endpoint}")
        yield sock
    finally:
        ctx.destroy(linger=0)


@contextlib.contextmanager
def one_server(tmp: Path, token: str | None) -> Iterator[tuple[subprocess.Popen, str, dict]]:
    ports = free_ports(2)
    ep = f"127.0.0.1:{ports[0]}"
    env = job_env(ep, f"127.0.0.1:{ports[1]}", token)
    proc = start_server(WORKERS / "serve.py", [], env, 0, ep, tmp / "serverlog.0")
    try:
        yield proc, ep, env
    finally:
        kill(proc)


def without_token(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k != "PADDLIKE_JOB_TOKEN"}


def test_a_process_without_the_job_token_cannot_pull_and_one_with_it_can(tmp_path):
    with one_server(tmp_path, TOKEN) as (proc, ep, env):
        assert run_peer(env, ep, "use") == [-1.0] * 4
        start = time.monotonic()
        stranger = peer(without_token(env), ep, "check")
        assert time.monotonic() - start < 10  # the client waits 30 s for a reply
        assert stranger.returncode == 1 and "PsAuthError" in stranger.stderr
        assert f"parameter server 0 at {ep} refused this process" in stranger.stderr
        assert "this process has no job token" in stranger.stderr
        guess = Client([ep], 0, 30, policy=auth.Policy.create("guess", None))
        with pytest.raises(PsAuthError, match="this process holds a job token"):
            guess.call([(0, Message(Op.PULL_DENSE, text="w"))], probe=False)
        guess.close()
        assert run_peer(env, ep, "check") == [-1.0] * 4
        assert proc.wait(10) == 0
    log = (tmp_path / "serverlog.0").read_text()
    assert "job token required" in log and TOKEN not in log
    refusals = [line for line in log.splitlines() if "refused peer" in line]
    assert refusals == [
        "paddlike auth: parameter server 0: refused peer 127.0.0.1: it has no job token "
        "(logged once per address)"
    ]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("probe", [False, True])
def test_a_client_refused_before_its_first_request_raises_at_once_instead_of_hanging(
    tmp_path, probe
):
    # Under load the I/O thread may finish a refused handshake before the first request
    # is sent: the socket then has no peer, and a blocking send would wait for ever.
    with one_server(tmp_path, TOKEN) as (_proc, ep, _env):
        guess = Client([ep], 0, 30, policy=auth.Policy.create("guess", None))
        try:
            assert guess.watches[0].socket.poll(20_000), "the server never refused the handshake"
            start = time.monotonic()
            with pytest.raises(PsAuthError, match=f"parameter server 0 at {ep} refused"):
                guess.call([(0, Message(Op.PULL_DENSE, text="w"))], probe=probe)
            assert time.monotonic() - start < 10  # the call's deadline is 30 s
        finally:
            guess.close()


@pytest.mark.timeout(60)
def test_a_request_to_a_server_that_never_accepts_a_connection_ends_at_its_deadline():
    (port,) = free_ports(1)  # nothing listens there
    client = Client([f"127.0.0.1:{port}"], 0, 2, request_timeout=1)
    try:
        with pytest.raises(PsTimeoutError, match=f"parameter server 0 at 127.0.0.1:{port} did"):
            client.call([(0, Message(Op.HELLO, arg0=1, arg1=1))], probe=False)
    finally:
        client.close()


def test_save_and_load_take_absolute_directories_only(tmp_path):
    with one_server(tmp_path, None) as (_proc, ep, env), token_client(ep, env) as sock:
        for op in (Op.SAVE, Op.LOAD):
            rel = f"relative-{os.getpid()}-{op.name}"
            sock.send_multipart(wire.encode(Message(op, trainer=0, text=json.dumps({"dir": rel}))))
            assert sock.poll(10_000)
            rep = wire.decode(sock.recv_multipart())
            assert rep.status == Status.ERROR
            assert f"{op.name} directory {rel!r} is not an absolute path" in rep.text
            assert not Path(rel).exists()


# --- random frames from an authenticated peer -----------------------------------------

_OPS = st.sampled_from([op for op in Op if op is not Op.STOP]) | st.integers(0, 255).filter(
    lambda op: op != Op.STOP  # a valid STOP from the job's trainer ends the server
)
_I64 = st.integers(-(2**63), 2**63 - 1)
_DIM = _I64 | st.integers(0, 64)


@st.composite
def _requests(draw: st.DrawFn) -> list[bytes]:
    """A valid header over a body of any shape: sizes that agree or not, bytes or none."""
    descs = draw(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 3), _DIM, _DIM), max_size=3))
    narrays = draw(st.just(len(descs)) | st.integers(0, 9))
    header = wire.HEADER.pack(
        wire.MAGIC,
        wire.VERSION,
        draw(_OPS),
        draw(st.integers(0, 255)),
        narrays,
        draw(st.integers(0, 2**32 - 1)),
        draw(st.integers(-1, 2) | st.integers(-(2**31), 2**31 - 1)),
        draw(_I64),
        draw(_I64),
        draw(_I64),
    )
    text = draw(st.text(max_size=40).map(str.encode) | st.binary(max_size=40))
    body = b"".join(wire.ARRAY.pack(*d) for d in descs)
    data = []
    for _code, ndim, d0, d1 in descs:
        size = max(0, d0 if ndim >= 1 else 1) * max(0, d1 if ndim >= 2 else 1)
        nbytes = min(size * 8, 512)
        data.append(draw(st.binary(min_size=nbytes, max_size=nbytes) | st.binary(max_size=64)))
    return [
        header,
        text,
        body,
        *draw(st.lists(st.sampled_from(data), max_size=4) if data else st.just([])),
    ]


_MESSAGES = st.lists(st.binary(max_size=64), min_size=1, max_size=6) | _requests()


@pytest.fixture(scope="module")
def fuzzed_server(tmp_path_factory) -> Iterator[tuple[str, dict]]:
    with one_server(tmp_path_factory.mktemp("fuzz"), TOKEN) as (_proc, ep, env):
        yield ep, env


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(frames=_MESSAGES)
def test_random_frames_from_a_token_holder_get_a_reply_and_the_server_keeps_serving(
    fuzzed_server, frames
):
    ep, env = fuzzed_server
    with token_client(ep, env) as sock:
        sock.send_multipart(frames)
        assert sock.poll(10_000), f"no reply to {frames!r}"
        reply = wire.decode(sock.recv_multipart())
        assert reply.status in (Status.OK, Status.ERROR)


def test_a_real_client_still_works_after_the_random_frames(fuzzed_server):
    ep, env = fuzzed_server
    c = Client([ep], 0, 30, policy=auth.Policy.from_env(env))
    try:
        c.call([(0, Message(Op.HELLO, arg0=1, arg1=1))], probe=False)
        spec = ps.TableSpec("real", "dense", (3,), ps.SGD(lr=1.0).config(),
                            ps.Constant(2.0).config(), "async")  # fmt: skip
        c.call([(0, Message(Op.DECLARE, text=spec.to_json()))])
        c.call([(0, Message(Op.PUSH_DENSE, text="real", arrays=[np.ones(3, "f4")]))])
        assert c.call([(0, Message(Op.PULL_DENSE, text="real"))])[0].array(0).tolist() == [1.0] * 3
    finally:
        c.close()


# --- the policy itself, and CURVE --------------------------------------------------------


def test_the_policy_checks_the_address_first_then_the_token():
    p = auth.Policy.create(TOKEN, ["198.18.0.1"])
    good = [auth.USERNAME, auth.plain_password(TOKEN.encode())]
    assert p.refusal("198.18.0.1", b"PLAIN", good) is None
    assert p.refusal("127.0.0.1", b"PLAIN", good) is None
    assert p.refusal("::ffff:198.18.0.1", b"PLAIN", good) is None
    assert p.refusal("198.18.0.9", b"PLAIN", good) == "its address is not one of the job's hosts"
    assert p.refusal("198.18.0.1", b"PLAIN", [auth.USERNAME, auth.NO_TOKEN]) == (
        "it has no job token"
    )
    assert "wrong token" in p.refusal("198.18.0.1", b"PLAIN", [auth.USERNAME, b"x" * 64])
    assert "NULL mechanism" in p.refusal("198.18.0.1", b"NULL", [])
    open_job = auth.Policy.create(None, None)
    assert open_job.refusal("203.0.113.5", b"PLAIN", [auth.USERNAME, auth.NO_TOKEN]) is None
    assert TOKEN not in repr(p)


def test_a_servers_job_hosts_are_the_node_list_and_every_endpoints_host_or_unknown():
    server = {
        "TRAINING_ROLE": "PSERVER",
        "PADDLE_PSERVERS_IP_PORT_LIST": "198.18.0.1:6170",
        "POD_IP": "198.18.0.1",
        "PADDLE_PORT": "6170",
        "PADDLIKE_JOB_TOKEN": TOKEN,
    }
    listed = dict(
        server,
        PADDLIKE_NODE_HOSTS="nodea,nodeb",
        PADDLE_TRAINER_ENDPOINTS="198.18.0.2:6171",
        PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST="198.18.0.3:6172",
    )
    role = ps.role_from_env(listed)
    assert role.job_hosts == ("nodea", "nodeb", "198.18.0.1", "198.18.0.2", "198.18.0.3")
    assert role.token == TOKEN and TOKEN not in repr(role)
    assert ps.role_from_env(dict(server, PADDLE_TRAINERS_NUM="2")).job_hosts is None


def test_curve_admits_holders_of_the_token_and_names_the_server_to_the_others():
    ctx = zmq.Context()
    policy = auth.Policy.create(TOKEN, [], auth.Mechanism.CURVE)
    server = ctx.socket(zmq.ROUTER)
    gate = auth.secure_server(server, policy, "test server")
    try:
        port = server.bind_to_random_port("tcp://127.0.0.1")
        for token, served in ((TOKEN, True), ("guess", False)):
            client = ctx.socket(zmq.DEALER)
            client.linger = 0
            mine = auth.Policy.create(token, None, auth.Mechanism.CURVE)
            auth.secure_client(client, mine)
            watch = auth.HandshakeWatch(client, f"test server at port {port}", mine)
            try:
                client.connect(f"tcp://127.0.0.1:{port}")
                client.send(b"hi")
                if served:
                    assert server.poll(10_000) and server.recv_multipart()[1] == b"hi"
                    continue
                deadline = time.monotonic() + 10
                with pytest.raises(auth.AuthError, match=f"test server at port {port} hung up"):
                    while time.monotonic() < deadline:
                        watch.socket.poll(1000)
                        watch.check()
                assert not server.poll(0)
            finally:
                watch.close()
                client.close()
    finally:
        gate.close()
        ctx.destroy(linger=0)
