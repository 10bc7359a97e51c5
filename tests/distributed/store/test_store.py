"""The TCP key-value store: operations, deadlines, security, and robustness to bad frames."""

from __future__ import annotations

import contextlib
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from paddlike.distributed.store import (
    StoreAuthError,
    StoreClient,
    StoreError,
    StoreServer,
    StoreTimeoutError,
)
from tests.support.netns import netns_cluster


@pytest.fixture
def server() -> Iterator[StoreServer]:
    with StoreServer().start() as srv:
        yield srv


@pytest.fixture
def client(server: StoreServer) -> Iterator[StoreClient]:
    with StoreClient(*server.address, timeout=10) as c:
        yield c


def test_set_then_get_returns_the_bytes_and_str_values_are_utf8(client: StoreClient) -> None:
    client.set("a", b"\x00\xffraw")
    client.set("b", "héllo")
    assert client.get("a") == b"\x00\xffraw"
    assert client.get("b") == "héllo".encode()
    assert client.try_get("missing") is None


def test_get_waits_for_a_key_another_client_sets(server: StoreServer) -> None:
    result: list[bytes] = []
    with StoreClient(*server.address) as waiter, StoreClient(*server.address) as setter:
        t = threading.Thread(target=lambda: result.append(waiter.get("late", timeout=30)))
        t.start()
        setter.set("late", b"here")
        t.join(timeout=30)
    assert result == [b"here"]


def test_a_blocked_get_does_not_delay_other_clients(server: StoreServer) -> None:
    with StoreClient(*server.address) as waiter, StoreClient(*server.address) as other:
        t = threading.Thread(target=lambda: waiter.get("never-yet", timeout=60))
        t.start()
        started = time.monotonic()
        for i in range(20):
            other.set(f"k{i}", b"v")
            assert other.get(f"k{i}") == b"v"
        assert time.monotonic() - started < 5
        other.set("never-yet", b"now")
        t.join(timeout=30)
        assert not t.is_alive()


def test_get_timeout_names_the_store_address_and_key(
    server: StoreServer, client: StoreClient
) -> None:
    host, port = server.address
    with pytest.raises(StoreTimeoutError, match=rf"'nokey'.*{host}:{port}.*0.2 s"):
        client.get("nokey", timeout=0.2)
    # the connection is still usable after a timeout
    client.set("x", b"1")
    assert client.get("x") == b"1"


def test_add_is_atomic_across_concurrent_clients(server: StoreServer) -> None:
    def bump() -> None:
        with StoreClient(*server.address) as c:
            for _ in range(50):
                c.add("counter")

    threads = [threading.Thread(target=bump) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    with StoreClient(*server.address) as c:
        assert c.add("counter", 0) == 200
        assert c.add("counter", -10) == 190
        assert c.get("counter") == b"190"


def test_add_to_a_non_counter_names_the_key(client: StoreClient) -> None:
    client.set("text", b"abc")
    with pytest.raises(StoreError, match=r"'text'.*not an integer"):
        client.add("text")


def test_compare_set_swaps_only_on_the_expected_value(client: StoreClient) -> None:
    assert client.compare_set("leader", None, b"node1") == b"node1"
    assert client.compare_set("leader", None, b"node2") == b"node1"  # already set: unchanged
    assert client.compare_set("leader", b"node9", b"node2") == b"node1"
    assert client.compare_set("leader", b"node1", b"node2") == b"node2"
    assert client.get("leader") == b"node2"
    assert client.compare_set("absent", b"x", b"y") == b""
    assert client.try_get("absent") is None


def test_delete_reports_whether_the_key_existed(client: StoreClient) -> None:
    client.set("gone", b"1")
    assert client.delete("gone") is True
    assert client.delete("gone") is False
    assert client.try_get("gone") is None


def test_wait_returns_when_all_keys_exist_and_its_timeout_lists_the_missing(
    client: StoreClient,
) -> None:
    client.set("w1", b"")
    client.set("w2", b"")
    client.wait(["w1", "w2"], timeout=5)
    with pytest.raises(StoreTimeoutError, match=r"keys w3 did not appear"):
        client.wait(["w1", "w3"], timeout=0.2)


def test_barrier_releases_all_parties_and_can_be_reused(server: StoreServer) -> None:
    passed: list[int] = []
    lock = threading.Lock()

    def party(i: int) -> None:
        with StoreClient(*server.address) as c:
            for round_ in range(3):
                c.barrier("sync", 3, timeout=30)
                with lock:
                    passed.append(round_)

    threads = [threading.Thread(target=party, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(passed) == [0, 0, 0, 1, 1, 1, 2, 2, 2]


def test_barrier_timeout_says_how_many_arrived(client: StoreClient) -> None:
    with pytest.raises(StoreTimeoutError, match=r"barrier 'lonely'.*1 of 3 arrived"):
        client.barrier("lonely", 3, timeout=0.2)


def test_one_client_is_usable_from_several_threads(client: StoreClient) -> None:
    def work(i: int) -> None:
        for j in range(30):
            client.set(f"t{i}/{j}", str(j))
            assert client.get(f"t{i}/{j}") == str(j).encode()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert client.add("done", 0) == 0


def _bound_unlistening_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


def test_client_retries_until_the_server_comes_up() -> None:
    sock = _bound_unlistening_socket()  # the port is ours but refuses connections for now
    port = sock.getsockname()[1]
    got: list[bytes | BaseException] = []

    def connect() -> None:
        try:
            with StoreClient("127.0.0.1", port, timeout=20) as c:
                got.append(c.get("ready", timeout=20))
        except BaseException as exc:  # reported by the assertion below
            got.append(exc)

    t = threading.Thread(target=connect)
    t.start()
    with StoreServer(sock=sock).start() as srv, StoreClient(*srv.address) as c:
        c.set("ready", b"yes")
        t.join(timeout=30)
    assert got == [b"yes"]


def test_connect_timeout_names_the_address_and_the_time_waited() -> None:
    sock = _bound_unlistening_socket()
    port = sock.getsockname()[1]
    try:
        with pytest.raises(StoreTimeoutError, match=rf"127.0.0.1:{port} within 0\.\d s"):
            StoreClient("127.0.0.1", port, timeout=0.3)
    finally:
        sock.close()


def test_a_client_with_the_job_token_is_served() -> None:
    with (
        StoreServer(token=b"s3cret").start() as srv,
        StoreClient(*srv.address, token=b"s3cret") as c,
    ):
        c.set("k", b"v")
        assert c.get("k") == b"v"


def test_clients_without_or_with_a_wrong_token_are_refused_and_logged(
    capfd: pytest.CaptureFixture[str],
) -> None:
    with StoreServer(token=b"s3cret").start() as srv:
        addr = f"{srv.address[0]}:{srv.address[1]}"
        with pytest.raises(StoreAuthError, match=rf"{addr} requires a job token"):
            StoreClient(*srv.address, timeout=2)
        with pytest.raises(StoreAuthError, match=rf"{addr} rejected this client's job token"):
            StoreClient(*srv.address, token=b"guess", timeout=2)
        with StoreClient(*srv.address, token=b"s3cret") as good:
            assert good.try_get("anything") is None
    err = capfd.readouterr().err
    # two refusals from one address: one line (a stranger's many tries do not flood it)
    assert err.count(f"paddlike store: {addr} refused peer 127.0.0.1") == 1, err
    assert "refused peer 127.0.0.1: wrong or missing job token (logged once per address)" in err


def test_the_host_can_answer_its_waiters_itself() -> None:
    with StoreServer(token=b"s3cret").start() as srv:
        with pytest.raises(StoreAuthError):
            StoreClient(*srv.address, token=b"guess", timeout=2)
        assert srv.refused == {"127.0.0.1": "wrong or missing job token"}
        with StoreClient(*srv.address, token=b"s3cret") as waiter:
            answer = threading.Timer(0.05, srv.compare_set, ("verdict", None, b"stop"))
            answer.start()
            assert waiter.get("verdict", timeout=10) == b"stop"  # woken by the host's write
            answer.join()
        assert srv.compare_set("verdict", None, b"other") == b"stop"  # create-only held
        assert srv.peek("verdict") == b"stop" and srv.peek("absent") is None


def test_closing_the_server_fails_a_waiting_get_promptly() -> None:
    srv = StoreServer().start()
    c = StoreClient(*srv.address)
    errors: list[BaseException] = []

    def wait() -> None:
        try:
            c.get("never", timeout=60)
        except StoreError as exc:
            errors.append(exc)

    t = threading.Thread(target=wait)
    t.start()
    started = time.monotonic()
    srv.close()
    t.join(timeout=30)
    assert errors and time.monotonic() - started < 5
    c.close()


# --- robustness: random and truncated frames --------------------------------------------


def _handshake(sock: socket.socket) -> None:
    """Complete the tokenless handshake by hand, so the fuzz bytes reach the command parser."""
    sock.settimeout(5)
    (n,) = struct.unpack(">I", sock.recv(4, socket.MSG_WAITALL))
    sock.recv(n, socket.MSG_WAITALL)
    sock.sendall(struct.pack(">I", 0))
    (n,) = struct.unpack(">I", sock.recv(4, socket.MSG_WAITALL))
    sock.recv(n, socket.MSG_WAITALL)


_frames = st.one_of(
    st.binary(max_size=64),  # raw garbage, often a short or huge length prefix
    st.builds(  # a well-formed frame around garbage: reaches the command decoder
        lambda body: struct.pack(">I", len(body)) + body,
        st.binary(max_size=64),
    ),
    st.builds(  # a valid opcode with random fields
        lambda op, body: struct.pack(">I", len(body) + 1) + bytes([op]) + body,
        st.integers(0, 10),
        st.binary(max_size=48),
    ),
    st.builds(  # a frame cut short: promises more than it sends
        lambda body, extra: struct.pack(">I", len(body) + extra) + body,
        st.binary(max_size=32),
        st.integers(1, 1000),
    ),
)


@pytest.fixture(scope="module")
def fuzz_server() -> Iterator[StoreServer]:
    with StoreServer().start() as srv:
        yield srv


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=_frames, after_handshake=st.booleans())
def test_random_and_truncated_frames_never_crash_or_wedge_the_server(
    fuzz_server: StoreServer, data: bytes, after_handshake: bool
) -> None:
    with (
        socket.create_connection(fuzz_server.address, timeout=5) as raw,
        contextlib.suppress(OSError),
    ):
        if after_handshake:
            _handshake(raw)
        raw.sendall(data)
    # the bad peer is gone (or still waiting on its own thread): others are served at once
    with StoreClient(*fuzz_server.address, timeout=5) as c:
        c.set("alive", b"1")
        assert c.get("alive", timeout=5) == b"1"


# --- the allow-list, across network namespaces ---------------------------------------------

_SERVE = """
import sys
from paddlike.distributed.store import StoreServer
srv = StoreServer(sys.argv[1], 0, allowed_hosts=sys.argv[2].split(",")).start()
print(srv.address[1], flush=True)
sys.stdin.read()
"""

_CONNECT = """
import sys
from paddlike.distributed.store import StoreClient, StoreAuthError
try:
    with StoreClient(sys.argv[1], int(sys.argv[2]), timeout=10) as c:
        c.set("from", sys.argv[3]); print("served", flush=True)
except StoreAuthError as exc:
    print("refused:", exc, flush=True); sys.exit(3)
"""


@pytest.mark.netns
def test_a_peer_outside_the_job_is_refused_and_a_job_host_is_served() -> None:
    with netns_cluster(3, ["storehost", "member", "outsider"]) as cluster:
        host, member, outsider = cluster.nodes
        srv = host.popen(
            [sys.executable, "-c", _SERVE, host.addr, f"{host.addr},{member.addr}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert srv.stdout is not None and srv.stdin is not None
        port = srv.stdout.readline().decode().strip()
        ok = member.run(
            [sys.executable, "-c", _CONNECT, host.addr, port, "member"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        bad = outsider.run(
            [sys.executable, "-c", _CONNECT, host.addr, port, "outsider"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        _, err = srv.communicate(timeout=30)  # closing stdin stops the server
    assert ok.returncode == 0 and ok.stdout.strip() == "served"
    assert bad.returncode == 3
    assert f"{host.addr}:{port} refused this client" in bad.stdout
    assert (
        f"refused peer {outsider.addr}: its address is not one of the job's hosts" in err.decode()
    )


def test_the_last_writes_before_close_get_their_answers_not_a_closed_connection() -> None:
    # The launchers' end of job: node 0 closes its store as soon as every node's "done"
    # key is there; each node's set of that key must still be answered.
    for _ in range(30):
        srv = StoreServer().start()
        clients = [StoreClient(*srv.address, timeout=5) for _ in range(9)]
        owner, setters = clients[0], clients[1:]
        keys = [f"done/{i}" for i in range(len(setters))]
        errors: list[BaseException] = []

        def done(c: StoreClient, key: str, errors: list[BaseException] = errors) -> None:
            try:
                c.set(key, b"1")
            except StoreError as exc:
                errors.append(exc)

        threads = [threading.Thread(target=done, args=a) for a in zip(setters, keys, strict=True)]
        try:
            for t in threads:
                t.start()
            owner.wait(keys, timeout=5)
            srv.close()
            for t in threads:
                t.join(timeout=10)
        finally:
            for c in clients:
                c.close()
            srv.close()
        assert errors == []


def test_a_get_waiting_when_the_store_closes_answers_timeout(server: StoreServer) -> None:
    with StoreClient(*server.address, timeout=5) as waiter:
        waiter.ping()
        threading.Timer(0.2, server.close).start()
        with pytest.raises(StoreTimeoutError, match="'never'"):
            waiter.get("never", timeout=5)


# --- get_many, parked requests, one serving thread ------------------------------------------


def test_get_many_waits_for_the_last_key_then_returns_every_value_in_order(
    server: StoreServer,
) -> None:
    result: list[list[bytes]] = []
    with StoreClient(*server.address) as reader, StoreClient(*server.address) as writer:
        writer.set("n/1", b"one")
        t = threading.Thread(
            target=lambda: result.append(reader.get_many(["n/0", "n/1", "n/2"], timeout=30))
        )
        t.start()
        writer.set("n/2", b"two")
        writer.set("n/0", b"zero")
        t.join(timeout=30)
    assert result == [[b"zero", b"one", b"two"]]


def test_get_many_timeout_names_only_the_keys_still_missing(client: StoreClient) -> None:
    client.set("here", b"1")
    started = time.monotonic()
    with pytest.raises(StoreTimeoutError, match=r"keys gone/a,gone/b did not appear .* 0.2 s"):
        client.get_many(["here", "gone/a", "gone/b"], timeout=0.2)
    assert 0.15 < time.monotonic() - started < 5


def test_a_write_to_another_key_does_not_answer_a_waiting_get(server: StoreServer) -> None:
    with StoreClient(*server.address) as waiter, StoreClient(*server.address) as writer:
        got: list[bytes] = []
        t = threading.Thread(target=lambda: got.append(waiter.get("mine", timeout=30)))
        t.start()
        for i in range(50):
            writer.set(f"other/{i}", b"x")
        writer.ping()  # every write above is applied; the get still waits
        assert got == [] and t.is_alive()
        writer.set("mine", b"now")
        t.join(timeout=30)
    assert got == [b"now"]


def test_hundreds_of_waiting_clients_are_answered_by_one_write_from_one_thread(
    server: StoreServer,
) -> None:
    n = 300
    clients = [StoreClient(*server.address, timeout=30) for _ in range(n)]
    answers: list[bytes] = []
    try:
        before = {t.name for t in threading.enumerate()}
        threads = [
            threading.Thread(target=lambda c=c: answers.append(c.get("go", timeout=30)))
            for c in clients
        ]
        for t in threads:
            t.start()
        # the server's side of 300 connections is one thread, whatever waits on it
        serving = [t for t in threading.enumerate() if t.name == f"store-{server.address[1]}"]
        assert len(serving) == 1 and not any(t.name in before for t in threads)
        with StoreClient(*server.address) as writer:
            writer.set("go", b"1")
        for t in threads:
            t.join(timeout=30)
    finally:
        for c in clients:
            c.close()
    assert answers == [b"1"] * n


def test_a_client_that_leaves_while_waiting_does_not_hold_the_key_or_the_server(
    server: StoreServer,
) -> None:
    sock = socket.create_connection(server.address, timeout=5)
    _handshake(sock)
    key = b"never"
    sock.sendall(struct.pack(">I", 1 + 4 + len(key) + 4) + b"\x02" + struct.pack(">I", len(key)))
    sock.sendall(key + struct.pack(">I", 60_000))  # get "never", 60 s
    sock.close()
    with StoreClient(*server.address) as c:
        c.set("never", b"came")  # no reply goes to the gone client; the server goes on
        assert c.get("never", timeout=5) == b"came"
        assert c.get_many(["never"], timeout=5) == [b"came"]
