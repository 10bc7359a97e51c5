"""The launchers' store on a real etcd server (`--master etcd://...`).

Unit tests run etcd on loopback; the end-to-end tests run it inside a namespace of
the test cluster (so that the namespace nodes reach it) and a 2-node job through it.
Everything skips with a reason when the `etcd` binary is absent.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from paddlike.distributed.store import StoreError, StoreTimeoutError
from paddlike.launch.peers import etcd as etcd_module
from paddlike.launch.peers.etcd import EtcdStore, parse_etcd_master
from paddlike.launch.peers.liveness import LeaseLiveness
from tests.support.fixed_ports import fixed_ports
from tests.support.logwait import wait_for_text
from tests.support.multinode_common import start_launcher, write_worker
from tests.support.netns import Node, netns_cluster

ETCD = shutil.which("etcd")
pytestmark = pytest.mark.skipif(ETCD is None, reason="etcd is not installed (Debian: etcd-server)")


def _etcd_argv(data_dir: Path, host: str, client_port: int, peer_port: int) -> list[str]:
    client, peer = f"http://{host}:{client_port}", f"http://{host}:{peer_port}"
    return [
        str(ETCD),
        "--name=t",
        f"--data-dir={data_dir}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=t={peer}",
        "--log-level=error",
    ]


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[tuple[str, int]]:
    """An etcd server on loopback; killed at the end whatever happens."""
    port = fixed_ports(2)  # clients at port, peers at port + 1
    argv = _etcd_argv(tmp_path / "etcd", "127.0.0.1", port, port + 1)
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                    if json.loads(r.read()).get("health") == "true":
                        break
            except OSError:
                pass
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline, "etcd did not become healthy in 20 s"
            time.sleep(0.05)  # etcd's health endpoint offers nothing to wait on
        yield ("127.0.0.1", port)
    finally:
        _stop(proc)


@pytest.fixture
def store(etcd: tuple[str, int], request: pytest.FixtureRequest) -> Iterator[EtcdStore]:
    s = EtcdStore([etcd], job_id=request.node.name[:40], timeout=5)
    s.grant_lease(2)
    yield s
    s.close()


def test_the_etcd_master_lists_every_endpoint() -> None:
    assert parse_etcd_master("etcd://10.0.0.1:2379,10.0.0.2:2379") == [
        ("10.0.0.1", 2379),
        ("10.0.0.2", 2379),
    ]


def test_compare_set_creates_once_and_returns_the_value_stored(store: EtcdStore) -> None:
    assert store.compare_set("k", None, b"first") == b"first"
    assert store.compare_set("k", None, b"second") == b"first"
    assert store.compare_set("k", b"first", b"third") == b"third"
    assert store.compare_set("absent", b"x", b"y") == b""
    assert store.try_get("k") == b"third" and store.try_get("absent") is None


def test_add_is_atomic_across_threads(store: EtcdStore) -> None:
    seen: list[int] = []
    threads = [
        threading.Thread(target=lambda: seen.extend(store.add("n") for _ in range(10)))
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(seen) == list(range(1, 41))


def test_a_counter_reads_as_its_count_and_never_retries(store: EtcdStore) -> None:
    calls: list[str] = []
    real = store._call

    def counted(path: str, body: dict, timeout: float | None = None) -> dict:
        calls.append(path)
        return real(path, body, timeout)

    store._call = counted  # type: ignore[method-assign]
    assert store.try_get("c") is None and store.add("c", 0) == 0
    assert [store.add("c") for _ in range(3)] == [1, 2, 3]
    assert store.add("c", 2) == 5 and store.try_get("c") == b"5"
    assert store.get("c", timeout=1) == b"5"
    assert store.try_get("c\0") is None  # a tally range of its own: no other key's
    assert len(calls) == 9  # one request per call: no compare-and-swap retried
    with pytest.raises(StoreError, match="only counts up"):
        store.add("c", -1)


def test_a_waiting_get_of_a_counter_wakes_on_the_first_tally(store: EtcdStore) -> None:
    threading.Timer(0.2, store.add, args=("arrivals",)).start()
    assert store.get("arrivals", timeout=5) == b"1"


def test_a_wait_made_of_short_waits_opens_one_watch(
    store: EtcdStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[object] = []
    real = etcd_module.WatchStream

    def counted(*args: object, **kwargs: object) -> object:
        opened.append(args)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(etcd_module, "WatchStream", counted)
    for _ in range(5):  # as a launcher waits for the verdict, a second at a time
        with pytest.raises(StoreTimeoutError):
            store.get("verdict", timeout=0.05)
    threading.Timer(0.1, store.set, args=("verdict", b"ok")).start()
    assert store.get("verdict", timeout=5) == b"ok"
    assert len(opened) == 1  # (was one per wait)
    assert store.get("verdict", timeout=1) == b"ok" and len(opened) == 1


def test_an_arrival_is_counted_claimed_and_counted_again_in_one_request(
    store: EtcdStore,
) -> None:
    assert store.arrive_and_claim("arrived", "node/0", b"a", "count") == (1, b"a", 1)
    assert store.arrive_and_claim("arrived", "node/0", b"twin", "count") == (2, b"a", None)
    assert store.arrive_and_claim("arrived", "node/1", b"b", "count") == (3, b"b", 2)
    assert store.try_get("arrived") == b"3" and store.try_get("count") == b"2"
    assert store.try_get("node/0") == b"a"


def test_get_many_reads_present_keys_at_once_and_waits_for_the_rest(store: EtcdStore) -> None:
    for i in range(3):
        store.set(f"r/node/{i}", b"e%d" % i)
    store.set("r/nodes", b"not one of them")
    threading.Timer(0.2, store.set, args=("r/node/3", b"e3")).start()
    assert store.get_many([f"r/node/{i}" for i in range(4)], timeout=5) == [
        b"e0",
        b"e1",
        b"e2",
        b"e3",
    ]
    with pytest.raises(StoreTimeoutError, match="'r/node/9' did not appear"):
        store.get_many(["r/node/0", "r/node/9"], timeout=0.3)


def test_get_waits_for_a_put_and_times_out_naming_the_key(store: EtcdStore) -> None:
    threading.Timer(0.2, store.set, args=("later", b"v")).start()
    assert store.get("later", timeout=5) == b"v"
    with pytest.raises(StoreTimeoutError, match="'never' did not appear in etcd"):
        store.get("never", timeout=0.3)


def _closed_connections_to(port: int) -> int:
    """Closed connections to or from `port` not yet forgotten (TIME_WAIT, on whichever side
    closed first): one per request when every request opens a connection of its own."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                ports = {int(fields[k].rsplit(":", 1)[1], 16) for k in (1, 2)}
                count += port in ports and fields[3] == "06"
    return count


def test_calls_keep_one_connection_per_thread_and_a_waiting_get_still_sees_the_put(
    store: EtcdStore, etcd: tuple[str, int]
) -> None:
    before = _closed_connections_to(etcd[1])
    for i in range(40):
        store.set(f"kept/{i}", b"v")
        assert store.try_get(f"kept/{i}") == b"v"
    assert _closed_connections_to(etcd[1]) - before <= 2  # (was 80: one per call)
    # the watch behind a waiting get streams on a connection of its own
    other = store.sharing_lease()
    threading.Timer(0.2, other.set, args=("kept/late", b"came")).start()
    assert store.get("kept/late", timeout=10) == b"came"
    assert store.add("kept/n") == 1 and store.try_get("kept/0") == b"v"


def test_missing_keys_are_found_in_one_range_read(store: EtcdStore) -> None:
    for i in (0, 2, 10):
        store.set(f"rdzv/0/node/{i}", b"e")
    store.set("rdzv/0/nodes-not-these", b"x")  # shares the prefix, is not asked about
    keys = [f"rdzv/0/node/{i}" for i in range(12)]
    calls: list[str] = []
    real = store._call
    store._call = lambda path, body, timeout=None: calls.append(path) or real(path, body, timeout)
    assert store.missing(keys) == [k for k in keys if k.rsplit("/", 1)[1] not in ("0", "2", "10")]
    assert calls == ["kv/range"]
    assert store.missing(["rdzv/0/node/2"]) == []


def test_keys_vanish_with_the_lease_so_a_dead_launcher_is_seen_as_silent(
    etcd: tuple[str, int],
) -> None:
    watcher = EtcdStore([etcd], job_id="lease-test", timeout=5)
    node1 = EtcdStore([etcd], job_id="lease-test", timeout=5)
    node1.grant_lease(2)
    node1.set("alive/1", b"1")
    liveness = LeaseLiveness(watcher, 0, 2)
    assert liveness.silent(time.monotonic()) == []
    node1.close()  # revokes: what a lease expiry does a TTL later
    assert liveness.silent(time.monotonic()) == [1]


def _etcd_in(node: Node, tmp_path: Path) -> subprocess.Popen[bytes]:
    # a fresh namespace: its ports are all free
    return node.popen(
        _etcd_argv(tmp_path / "etcd", node.addr, 2379, 2380),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def test_a_two_node_job_meets_and_runs_through_etcd(tmp_path: Path) -> None:
    script = write_worker(tmp_path)
    with netns_cluster(3, ["nodea", "nodeb", "etcdhost"]) as cluster:
        a, b, e = cluster.nodes
        server = _etcd_in(e, tmp_path)
        try:
            opts = ["--master", f"etcd://{e.addr}:2379", "--rdzv_timeout", "30"]
            procs = [
                start_launcher(n, "nodea,nodeb", tmp_path / f"l{i}", script, options=opts)
                for i, n in enumerate((a, b))
            ]
            outs = [p.communicate(timeout=60)[0].decode() for p in procs]
        finally:
            _stop(server)
    assert [p.returncode for p in procs] == [0, 0], outs
    assert f"at etcd://{e.addr}:2379" in outs[0]
    files = {(tmp_path / f"l{i}" / "endpoints.log").read_text() for i in range(2)}
    assert len(files) == 1
    for i in range(2):
        for j in range(2):
            text = (tmp_path / f"l{i}" / f"workerlog.{j}").read_text()
            assert f"RANK {2 * i + j} " in text


def test_a_worker_failure_and_a_killed_launcher_end_the_job_through_etcd(tmp_path: Path) -> None:
    script = write_worker(tmp_path)
    with netns_cluster(3, ["nodea", "nodeb", "etcdhost"]) as cluster:
        a, b, e = cluster.nodes
        server = _etcd_in(e, tmp_path)
        try:
            opts = ["--master", f"etcd://{e.addr}:2379", "--heartbeat_timeout", "2"]
            # round 1: rank 3 (node b) exits 3 -> both nodes end with that cause
            args = ["--fail", "3", "--code", "3", "--after", "0.3", "--sleep", "60"]
            procs = [
                start_launcher(
                    n, "nodea,nodeb", tmp_path / f"f{i}", script, options=opts, script_args=args
                )
                for i, n in enumerate((a, b))
            ]
            outs = [p.communicate(timeout=60)[0].decode() for p in procs]
            assert [p.returncode for p in procs] == [3, 3], outs
            assert "trainer rank 3 exited with code 3" in outs[0]
            # then: node b's launcher SIGKILLed -> its lease expires -> node a ends
            job = [*opts, "--job_id", "killed"]
            pa, pb = (
                start_launcher(
                    n,
                    "nodea,nodeb",
                    tmp_path / f"k{i}",
                    script,
                    options=job,
                    script_args=["--sleep", "60"],
                )
                for i, n in enumerate((a, b))
            )
            for i in range(2):
                wait_for_text(tmp_path / f"k{i}" / "workerlog.0", "RANK", timeout=30)
            killed = time.monotonic()
            os.kill(pb.pid, signal.SIGKILL)
            out_a = pa.communicate(timeout=60)[0].decode()
            took = time.monotonic() - killed
        finally:
            _stop(server)  # the launchers: the cluster kills whatever still runs in it
    assert pa.returncode not in (0, None), out_a
    # its guardian wrote so through etcd before its workers went (not after the lease)
    assert "node 1 (198.18.0.2) was lost: its launcher (pid" in out_a
    assert took < 2 + 2, out_a


def test_a_proxy_in_the_environment_is_not_used_to_reach_etcd(etcd: tuple[str, int]) -> None:
    # Cluster nodes often export a proxy for the internet; etcd must be reached directly.
    # A fresh process, so that urllib reads the proxy variables as a launcher would.
    dead = f"http://127.0.0.1:{fixed_ports()}"  # nothing listens there
    env = {k: v for k, v in os.environ.items() if k.lower() != "no_proxy"}
    env.update({name: dead for name in ("http_proxy", "HTTP_PROXY")})
    script = (
        "import sys\n"
        "from paddlike.launch.peers.etcd import EtcdStore\n"
        "s = EtcdStore([(sys.argv[1], int(sys.argv[2]))], job_id='proxy', timeout=3)\n"
        "s.set('k', b'v')\n"
        "assert s.get('k', timeout=3) == b'v'\n"
        "print('reached etcd directly')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, etcd[0], str(etcd[1])],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert "reached etcd directly" in done.stdout
