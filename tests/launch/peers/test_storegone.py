"""A store's port that refuses connections (its launcher gone) is told apart from one that
accepts them, and the cause says so in plain words."""

from __future__ import annotations

import socket
import threading

import pytest

from paddlike.launch.peers import storegone
from paddlike.launch.plan.policy import store_contact_cause
from tests.support.fixed_ports import fixed_ports

pytestmark = pytest.mark.timeout(30)


def _greet(server: socket.socket) -> None:
    conn, _ = server.accept()
    with conn:
        conn.sendall(b"hello")


def test_a_port_nothing_listens_on_refuses_and_a_listening_one_does_not():
    port = fixed_ports()
    assert storegone.refuses(f"127.0.0.1:{port}")
    with socket.create_server(("127.0.0.1", port)) as server:
        # silent (a store too busy to greet within the probe's second): not proof of anything
        assert not storegone.refuses(f"127.0.0.1:{port}", timeout=0.2)
        greeter = threading.Thread(target=_greet, args=(server,))
        greeter.start()
        assert not storegone.refuses(f"127.0.0.1:{port}")
        greeter.join(10)


def test_a_connection_closed_before_the_stores_hello_is_a_store_gone():
    # what a listener dying with its process does to a connection still in its queue
    port = fixed_ports()
    with socket.create_server(("127.0.0.1", port)) as server:
        closer = threading.Thread(target=lambda: server.accept()[0].close())
        closer.start()
        assert storegone.refuses(f"127.0.0.1:{port}")
        closer.join(10)


def test_only_a_node_that_does_not_host_the_tcp_store_asks():
    port = fixed_ports()
    assert storegone.refuses_us(f"127.0.0.1:{port}", hosts_store=False)
    assert not storegone.refuses_us(f"127.0.0.1:{port}", hosts_store=True)
    assert not storegone.refuses_us(f"etcd://127.0.0.1:{port}", hosts_store=False)


def test_a_refused_store_names_node_0s_launcher_gone_and_the_address_not_the_timeout():
    hosts = ("10.0.0.1", "10.0.0.2")
    cause = store_contact_cause(
        "10.0.0.1:6170", 1, hosts, "node 0 (10.0.0.1)", False, 10.0, "", 5.0, refused=True
    )
    assert cause.reason == (
        "node 1 (10.0.0.2) lost contact with node 0 (10.0.0.1): node 0's launcher is gone "
        "(its store at 10.0.0.1:6170 refused the connection)"
    )
    assert (cause.host, cause.node_index, cause.time) == ("10.0.0.1", 0, 5.0)
    silent = store_contact_cause(
        "10.0.0.1:6170", 1, hosts, "node 0 (10.0.0.1)", False, 10.0, "timed out", 5.0
    )
    assert "for 10 s (--heartbeat_timeout)" in silent.reason
