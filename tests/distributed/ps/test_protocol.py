"""The server against raw ZeroMQ frames and in-process workers: errors, deadlines, stopping."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import zmq

from paddlike.distributed import ps
from paddlike.distributed.ps import auth, wire
from paddlike.distributed.ps.client import Client
from paddlike.distributed.ps.wire import Message, Op, Status
from tests.support.logwait import wait_for_text
from tests.support.ps_workers.cluster import WORKERS, base_env, free_ports, kill, start_server


class Served:
    def __init__(self, proc: subprocess.Popen[bytes], endpoint: str, env: dict[str, str]):
        self.proc, self.endpoint, self.env = proc, endpoint, env
        self.ctx = zmq.Context()

    def dealer(self) -> zmq.Socket:
        """A raw socket with the job's credentials, as any peer the server serves has."""
        s = self.ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        auth.secure_client(s, auth.Policy.from_env(self.env))
        s.connect(f"tcp://{self.endpoint}")
        return s

    def ask(self, sock: zmq.Socket, frames: list) -> Message:
        sock.send_multipart(frames)
        assert sock.poll(10_000), "the server did not reply within 10 s"
        return wire.decode(sock.recv_multipart())

    def trainer_env(self, trainer_id: int = 0) -> dict[str, str]:
        return dict(self.env, TRAINING_ROLE="TRAINER", PADDLE_TRAINER_ID=str(trainer_id))


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    ports = free_ports(2)
    ep = f"127.0.0.1:{ports[0]}"
    env = base_env([ep], [f"127.0.0.1:{ports[1]}"])
    proc = start_server(WORKERS / "serve.py", [], env, 0, ep, tmp_path / "serverlog.0")
    # serving before a test's short deadlines start (its start-up takes seconds under load)
    wait_for_text(tmp_path / "serverlog.0", "serving on", timeout=60, writer=proc)
    s = Served(proc, ep, env)
    try:
        yield s
    finally:
        kill(proc)
        s.ctx.destroy(linger=0)


def frames(msg: Message) -> list[bytes]:
    return [bytes(f) for f in wire.encode(msg)]


def declare_dense(served: Served, sock: zmq.Socket, name: str, size: int) -> None:
    spec = ps.TableSpec(name, "dense", (size,), ps.SGD().config(), ps.Constant().config(), "async")
    assert served.ask(sock, frames(Message(Op.DECLARE, text=spec.to_json()))).status == Status.OK


def test_malformed_and_unknown_requests_get_error_replies_and_the_server_keeps_serving(served):
    sock = served.dealer()
    hello = frames(Message(Op.HELLO, arg0=1, arg1=1))
    bad_magic = [b"XXXX" + hello[0][4:], *hello[1:]]
    huge = ps.TableSpec("huge", "dense", (1 << 33,), ps.SGD().config(), ps.Constant().config(),
                        "async")  # fmt: skip
    cases = {
        "a message has at least 3 frames": [hello[0]],
        "header frame has 7 bytes": [b"garbage", b"", b""],
        "header frame has 0 bytes": [b""],
        "bad magic": bad_magic,
        "unknown op 99": frames(Message(99)),
        "expected 1 data frames, message is too short": frames(
            Message(Op.HELLO, arrays=[np.zeros(3, np.float32)])
        )[:-1],
        "data frame 0 has 5 bytes, expected 12": [
            *frames(Message(Op.HELLO, arrays=[np.zeros(3, np.float32)]))[:-1],
            b"12345",
        ],
        "no table 'nope'": frames(Message(Op.PULL_DENSE, text="nope")),
        "bad table declaration": frames(Message(Op.DECLARE, text="{not json")),
        "beyond the limit of 17179869184": [
            hello[0][:7] + b"\x01" + hello[0][8:],  # one array, declared 2**62 x 4 floats
            b"",
            wire.ARRAY.pack(1, 2, 1 << 62, 4),
        ],
        "this server's shard would hold 8589934592 elements, beyond the limit": frames(
            Message(Op.DECLARE, text=huge.to_json())
        ),
    }
    for expected, raw in cases.items():
        rep = served.ask(sock, raw)
        assert rep.status == Status.ERROR and expected in rep.text, (expected, rep.text)
    other = served.dealer()
    assert served.ask(other, hello).status == Status.OK


def test_wrong_shapes_and_dtypes_get_error_replies(served):
    sock = served.dealer()
    declare_dense(served, sock, "w", 10)
    push = served.ask(sock, frames(Message(Op.PUSH_DENSE, text="w", arrays=[np.ones(7, "f4")])))
    assert push.status == Status.ERROR
    assert "the gradient has 7 elements, this server's shard [0, 10) has 10" in push.text
    f64 = served.ask(sock, frames(Message(Op.PUSH_DENSE, text="w", arrays=[np.ones(10)])))
    assert "the gradient must be float32 with 1 dimension(s), got float64" in f64.text
    spec = ps.TableSpec("e", "sparse", (4,), ps.SGD().config(), ps.Uniform().config(), "async")
    served.ask(sock, frames(Message(Op.DECLARE, text=spec.to_json())))
    keys, grads = np.arange(3, dtype=np.int64), np.ones((3, 5), np.float32)
    rep = served.ask(sock, frames(Message(Op.PUSH_SPARSE, text="e", arrays=[keys, grads])))
    assert "the gradient has shape (3, 5), expected (3, 4) for 3 keys of dim 4" in rep.text
    ok = served.ask(sock, frames(Message(Op.PULL_DENSE, text="w")))
    assert ok.status == Status.OK and ok.array(0).tolist() == [0.0] * 10


def test_a_differing_declaration_is_an_error_naming_the_table_and_field(served):
    ps.init(served.trainer_env())
    ps.init_worker(mode="async", timeout=10)
    ps.sparse_table("emb", dim=8, optimizer=ps.Adagrad(lr=0.1))
    with pytest.raises(ps.PsError, match=r"table 'emb' is already declared with optimizer="):
        ps.sparse_table("emb", dim=8, optimizer=ps.Adam(lr=0.1))
    with pytest.raises(ps.PsError, match=r"table 'emb' is already declared with shape=\(8,\)"):
        ps.sparse_table("emb", dim=4, optimizer=ps.Adagrad(lr=0.1))
    ps.stop_worker()
    assert served.proc.wait(10) == 0  # its only trainer stopped


def test_a_dead_server_is_named_with_its_endpoint_within_the_deadline(served):
    ps.init(served.trainer_env())
    ps.init_worker(mode="async", timeout=1.5)
    w = ps.dense_table("w", shape=(4,))
    served.proc.kill()
    served.proc.wait(10)
    start = time.monotonic()
    with pytest.raises(ps.PsTimeoutError, match=f"parameter server 0 at {served.endpoint} did"):
        w.pull()
    assert time.monotonic() - start < 3


def test_sigterm_stops_the_server_with_exit_code_0(served):
    sock = served.dealer()
    assert served.ask(sock, frames(Message(Op.HELLO, arg0=1, arg1=1))).status == Status.OK
    served.proc.send_signal(signal.SIGTERM)
    assert served.proc.wait(10) == 0


# --- sync mode: waiting for a slow trainer is not the same as a dead server ---------------


@pytest.fixture
def served_two(tmp_path: Path) -> Iterator[Served]:
    """One server for two trainers (the test plays both through Client objects)."""
    ports = free_ports(3)
    ep = f"127.0.0.1:{ports[0]}"
    env = base_env([ep], [f"127.0.0.1:{ports[1]}", f"127.0.0.1:{ports[2]}"])
    proc = start_server(WORKERS / "serve.py", [], env, 0, ep, tmp_path / "serverlog.0")
    # serving before a test's short deadlines start (its start-up takes seconds under load)
    wait_for_text(tmp_path / "serverlog.0", "serving on", timeout=60, writer=proc)
    s = Served(proc, ep, env)
    try:
        yield s
    finally:
        kill(proc)
        s.ctx.destroy(linger=0)


def _sync_trainers(served: Served, wait: float, request: float) -> list[Client]:
    trainers = [Client([served.endpoint], tid, wait, request) for tid in (0, 1)]
    try:
        for c in trainers:  # the first contact waits for the server to start, as init_worker's
            c.call([(0, Message(Op.HELLO, arg0=1, arg1=2))], timeout=30, probe=False)
        spec = ps.TableSpec("w", "dense", (4,), ps.SGD(lr=1.0).config(),
                            ps.Constant().config(), "sync")  # fmt: skip
        trainers[0].call([(0, Message(Op.DECLARE, text=spec.to_json()))], timeout=10)
    except BaseException:
        for c in trainers:
            c.close()
        raise
    return trainers


def _push(c: Client, value: float) -> None:
    c.call([(0, Message(Op.PUSH_DENSE, step=0, text="w", arrays=[np.full(4, value, "f4")]))])


def _pull_in_thread(c: Client) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def pull() -> None:
        start = time.monotonic()
        try:
            out["values"] = c.call([(0, Message(Op.PULL_DENSE, step=1, text="w"))])[0].array(0)
        except ps.PsError as exc:
            out["error"] = exc
        out["elapsed"] = time.monotonic() - start

    t = threading.Thread(target=pull)
    t.start()
    return t, out


def test_a_sync_pull_waits_for_a_trainer_slower_than_the_request_timeout(served_two):
    trainers = _sync_trainers(served_two, wait=30, request=0.5)
    try:
        _push(trainers[0], 1.0)
        thread, out = _pull_in_thread(trainers[0])  # step 1: waits for trainer 1's step 0
        time.sleep(2.0)  # trainer 1's training step: four times the request timeout
        _push(trainers[1], 3.0)
        thread.join(30)
        assert "error" not in out, out
        assert out["values"].tolist() == [-2.0] * 4  # SGD lr 1 on the mean of 1 and 3
        assert out["elapsed"] >= 1.9
    finally:
        for c in trainers:
            c.close()


def test_a_sync_pull_past_its_wait_deadline_says_the_server_is_alive_and_waits(served_two):
    trainers = _sync_trainers(served_two, wait=1.5, request=0.5)
    try:
        _push(trainers[0], 1.0)
        thread, out = _pull_in_thread(trainers[0])  # trainer 1 never pushes
        thread.join(30)
        assert isinstance(out.get("error"), ps.PsTimeoutError), out
        assert "is alive but did not answer PULL_DENSE within 1.5 s" in str(out["error"])
        assert 1.4 <= out["elapsed"] < 5
    finally:
        for c in trainers:
            c.close()


def test_a_server_that_dies_while_a_sync_pull_waits_is_named_long_before_the_wait_deadline(
    served_two,
):
    trainers = _sync_trainers(served_two, wait=60, request=1.0)
    try:
        _push(trainers[0], 1.0)
        thread, out = _pull_in_thread(trainers[0])
        served_two.proc.kill()
        served_two.proc.wait(10)
        thread.join(30)
        assert isinstance(out.get("error"), ps.PsTimeoutError), out
        assert (f"parameter server 0 at {served_two.endpoint} did not answer PULL_DENSE nor a "
                "liveness check within 1 s") in str(out["error"])  # fmt: skip
        assert out["elapsed"] < 5  # the wait deadline is 60 s
    finally:
        for c in trainers:
            c.close()
