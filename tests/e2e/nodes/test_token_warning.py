"""A job of several nodes started per node (the same command typed on each, no
--hostfile) without a job token: node 0 says once that its stores accept any user of the
job's machines and how to give a token; the job still runs (a warning, not a refusal)."""

from __future__ import annotations

import os

import pytest

from tests.support.multinode_common import start_launcher, write_worker
from tests.support.netns import netns_cluster

pytestmark = [pytest.mark.netns, pytest.mark.timeout(120)]

WARNING = (
    "paddlike.launch: warning: this job of 2 nodes has no job token, so its stores accept "
    "any user of its machines; give every node the same --job_token_file FILE (or "
    "PADDLIKE_JOB_TOKEN_FILE, PADDLIKE_JOB_TOKEN)"
)


def _without_token(monkeypatch) -> None:
    for name in os.environ:
        if name.startswith("PADDLIKE_"):
            monkeypatch.delenv(name)


def test_node_0_of_a_job_started_per_node_without_a_token_warns_once(tmp_path, monkeypatch):
    _without_token(monkeypatch)
    script = write_worker(tmp_path)
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        a, b = cluster.nodes
        ips = f"{a.addr},{b.addr}"
        procs = [start_launcher(n, ips, tmp_path / f"l{i}", script) for i, n in enumerate((a, b))]
        outs = [p.communicate(timeout=90)[0].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert outs[0].splitlines().count(WARNING) == 1, outs[0]
    assert "job token" not in outs[1], outs[1]


def test_nodes_given_a_token_file_do_not_warn(tmp_path, monkeypatch):
    _without_token(monkeypatch)
    script = write_worker(tmp_path)
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    token.chmod(0o600)
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        a, b = cluster.nodes
        ips = f"{a.addr},{b.addr}"
        procs = [
            start_launcher(
                n, ips, tmp_path / f"l{i}", script, options=["--job_token_file", str(token)]
            )
            for i, n in enumerate((a, b))
        ]
        outs = [p.communicate(timeout=90)[0].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert not [out for out in outs if "warning" in out], outs


def test_a_token_typed_on_the_command_line_is_said_to_be_readable_by_every_user(
    tmp_path, monkeypatch
):
    """`ps` shows it to any local user: each node says so, once, and how to give it instead."""
    _without_token(monkeypatch)
    script = write_worker(tmp_path)
    typed = (
        "paddlike.launch: warning: --job_token on the command line can be read by every user "
        "of this machine (ps); give it by --job_token_file FILE or PADDLIKE_JOB_TOKEN"
    )
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        a, b = cluster.nodes
        ips = f"{a.addr},{b.addr}"
        procs = [
            start_launcher(n, ips, tmp_path / f"l{i}", script, options=["--job_token", "s3cret"])
            for i, n in enumerate((a, b))
        ]
        outs = [p.communicate(timeout=90)[0].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert [out.splitlines().count(typed) for out in outs] == [1, 1], outs
    assert "no job token" not in outs[0], outs[0]
