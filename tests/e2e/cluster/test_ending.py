"""How a job started with one command on a login node ends (issue 24): Ctrl-C, a second
Ctrl-C, a lost ssh connection, SIGUSR1 and passed-on signals. Each ending is one signal to
every host's launcher, so every worker gets its full grace; the starter never crashes and
leaves no ControlPath directory behind."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster.common import REPO, Site, site, worker_ranks
from tests.support.logwait import wait_until

pytestmark = pytest.mark.timeout(180)

# A worker whose SIGTERM (and SIGINT) handler takes 2 s (a checkpoint) and says so;
# SIGUSR2 is noted.
TERM_WORKER = """
import os, signal, sys, time
rank = int(os.environ["PADDLE_TRAINER_ID"])
def save(signum, frame):
    time.sleep(2)
    print("saved", rank, flush=True)
    sys.exit(0)
def note(signum, frame):
    print("got", signal.Signals(signum).name, rank, flush=True)
signal.signal(signal.SIGTERM, save)
signal.signal(signal.SIGINT, save)  # Ctrl-C reaches the workers as SIGINT first
signal.signal(signal.SIGUSR2, note)
print("RANK", rank, "x", "0", flush=True)
while True:
    time.sleep(0.2)
"""


@contextlib.contextmanager
def term_site(tmp_path: Path) -> Iterator[tuple[Site, Path, dict[str, str]]]:
    """Three hosts, the worker above, and a short TMPDIR of the test's own (the starter's
    ControlPath directory goes there: what is left in it is the starter's)."""
    with site(tmp_path) as s:
        s.worker.write_text(TERM_WORKER)
        tmp = Path(tempfile.mkdtemp(prefix="pe-", dir="/tmp"))
        try:
            yield s, tmp, {**os.environ, "TMPDIR": str(tmp)}
        finally:
            subprocess.run(["rm", "-rf", str(tmp)], check=False)


def start(s: Site, env: dict[str, str], *options: str) -> subprocess.Popen[bytes]:
    hostfile = s.hostfile("h0 slots=2\nh1 slots=2\nh2 slots=2\n")
    argv = s.argv(hostfile, "--kill_timeout", "10", *options)
    return s.login.popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_running(proc: subprocess.Popen[bytes], log_dir: Path, ranks: int = 6) -> None:
    """Until every host's first rank shows on the console and every rank wrote its line
    (its SIGTERM handler is in place by then)."""
    assert proc.stdout is not None
    hosts = set()
    for line in proc.stdout:
        if b"] RANK " in line:
            hosts.add(line.split(b"]")[0])
        if len(hosts) == 3:
            break
    assert len(hosts) == 3, hosts
    wait_until(
        lambda: worker_ranks(log_dir) == list(range(ranks)),
        under=log_dir,
        timeout=30,
        what=f"ranks 0..{ranks - 1} in the workers' logs under {log_dir}",
    )


def saved(log_dir: Path) -> list[int]:
    """The ranks whose SIGTERM handler ran to its end (their worker logs say so)."""
    return sorted(
        int(line.split()[1])
        for log in log_dir.rglob("workerlog.*")
        for line in log.read_text().splitlines()
        if line.startswith("saved ")
    )


def summaries(log_dir: Path) -> list[str]:
    return [p.read_text() for p in sorted(log_dir.rglob("summary.json"))]


def test_ctrl_c_gives_every_rank_its_full_grace_and_one_signal_per_host(tmp_path) -> None:
    with term_site(tmp_path) as (s, tmp, env):
        proc = start(s, env)
        wait_running(proc, s.tmp / "log")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=90)
        text = (out + err).decode()
        assert proc.returncode == 130, text
        assert " again: " not in text and "KeyError" not in text, text
        assert saved(s.tmp / "log") == [0, 1, 2, 3, 4, 5], text
        reports = summaries(s.tmp / "log")
        assert len(reports) == 3 and not any("SIGKILL" in r for r in reports), reports
        assert list(tmp.iterdir()) == []
        assert s.leftovers() == {}


def lines_in_logs(log_dir: Path, word: str, count: int) -> None:
    """Until `count` lines starting with `word` are in the workers' logs (on disk)."""

    def found() -> list[str]:
        return [
            line
            for log in log_dir.rglob("workerlog.*")
            for line in log.read_text().splitlines()
            if line.startswith(word)
        ]

    wait_until(
        lambda: len(found()) >= count,
        under=log_dir,
        timeout=30,
        what=f"{count} lines starting {word!r} in the workers' logs under {log_dir}",
    )


def test_a_second_ctrl_c_kills_at_once_without_a_crash_and_leaves_no_control_directory(
    tmp_path,
) -> None:
    with term_site(tmp_path) as (s, tmp, env):
        proc = start(s, env)
        wait_running(proc, s.tmp / "log")
        proc.send_signal(signal.SIGINT)
        time.sleep(0.3)  # the user's second Ctrl-C, a moment later (what is tested)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        text = (out + err).decode()
        assert proc.returncode == 130, text
        assert "KeyError" not in text and "Traceback" not in text, text
        assert text.count("received SIGINT again: killing the remaining processes now") == 3
        assert list(tmp.iterdir()) == []
        assert s.leftovers() == {}


def test_sigusr1_takes_stacks_on_every_host_and_handled_signals_reach_every_worker(
    tmp_path,
) -> None:
    with term_site(tmp_path) as (s, tmp, env):
        proc = start(s, env, "--signals_to_handle", "SIGINT,SIGTERM,SIGHUP,SIGUSR2")
        wait_running(proc, s.tmp / "log")
        proc.send_signal(signal.SIGUSR1)
        assert proc.stderr is not None
        stacks: list[bytes] = []
        requests = 0
        for line in proc.stderr:  # one request for the job; every host takes its stacks
            requests += b"stacks requested (received SIGUSR1 on node" in line
            if b"stacks of 2 ranks of this node in " in line:
                stacks.append(line.split(b"]")[0])
            if len(stacks) == 3:
                break
        assert sorted(stacks) == [b"[h0", b"[h1", b"[h2"] and requests == 3, stacks
        assert proc.poll() is None  # the job goes on
        proc.send_signal(signal.SIGUSR2)
        lines_in_logs(s.tmp / "log", "got SIGUSR2", 6)  # passed on to every worker
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 143, (out + err).decode()
        assert saved(s.tmp / "log") == [0, 1, 2, 3, 4, 5]
        assert list(tmp.iterdir()) == []
        assert s.leftovers() == {}


def test_console_all_prefixes_every_rank_alike_whatever_a_hosts_worker_count(
    tmp_path,
) -> None:
    with site(tmp_path) as s:
        hostfile = s.hostfile("h0 slots=2\nh1 slots=1\nh2 slots=1\n")
        done = s.run(s.argv(hostfile, "--console", "all"))
        assert done.returncode == 0, done.stdout + done.stderr
        for host, rank in (("h0", 0), ("h0", 1), ("h1", 2), ("h2", 3)):
            assert f"[{host}] [rank {rank}] RANK {rank} " in done.stdout, done.stdout
        assert s.leftovers() == {}


def test_a_lost_ssh_connection_names_the_host_exits_255_and_leaves_nothing(tmp_path) -> None:
    with term_site(tmp_path) as (s, tmp, env):
        proc = start(s, env)
        wait_running(proc, s.tmp / "log")
        s.cut_ssh(1)
        out, err = proc.communicate(timeout=60)
        text = (out + err).decode()
        assert "KeyError" not in text and "Traceback" not in text, text
        # h1's launcher hangs up at once (its stdin closed): the others may hear it from
        # the rendezvous (129) before this side's ssh notices the connection is gone (255)
        assert proc.returncode in (129, 255), text
        assert " again: " not in text, text  # no second signal (its line: "received X again: ...")
        assert list(tmp.iterdir()) == []
        assert s.leftovers() == {}
