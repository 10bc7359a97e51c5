"""One command on a shared cluster, seen by another local user (uid 4242, made with
setpriv): while the job runs, no process's command line on the login node or any host
shows a carried variable or the job's token, and that user, on a job host, cannot read
node 0's store or write the job's abort key. The pid namespace is shared by the network
namespaces here, so every node's processes are in the /proc that uid 4242 reads."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster.common import LAUNCH, REPO, Site, site
from tests.support.logwait import wait_exited, wait_until
from tests.support.second_user import PROC_SPY

pytestmark = pytest.mark.timeout(180)

OTHER_USER = ["setpriv", "--reuid", "4242", "--regid", "4242", "--clear-groups"]
SECRETS = {"WANDB_API_KEY": "wandb-secret-7f3a", "DS_SECRET": "ds-secret-91bc"}
TOKEN = "token-secret-5e0d"
MASTER_PORT = 29400  # node 0's own namespace: no other test's port

# What uid 4242 runs: every process's command line (and environment, where it may read
# one) searched for the secrets it is given on stdin; then node 0's store, without a token.
SPY = PROC_SPY + r"""
store = "no store"
from paddlike.distributed.store import StoreAuthError, StoreClient
from paddlike.launch.peers.protocol import abort_key
try:
    with StoreClient(sys.argv[1], int(sys.argv[2]), timeout=5.0, token=None,
                     reconnect_timeout=0.0) as kv:
        kv.try_get("job/0/world")
        kv.set(abort_key(0), "FAILED: injected by uid 4242")
        store = "read and wrote"
except StoreAuthError as exc:
    store = f"refused: {exc}"
print(json.dumps({"seen": seen, "store": store}))
"""


@contextlib.contextmanager
def readable_package() -> Iterator[Path]:
    """A copy of the package that uid 4242 can import (the venv under root's home and the
    test's tmp_path are not theirs to enter)."""
    top = Path(tempfile.mkdtemp(prefix="plk-pkg-"))
    try:
        shutil.copytree(REPO / "paddlike", top / "paddlike", ignore=shutil.ignore_patterns("*.pyc"))
        for path in (top, *top.rglob("*")):
            path.chmod(0o755 if path.is_dir() else 0o644)
        yield top
    finally:
        shutil.rmtree(top, ignore_errors=True)


def _spy(s: Site, package: Path) -> dict:
    """SPY as uid 4242 on host h1 (an address node 0's store allows)."""
    done = s.hosts[1].run(
        [*OTHER_USER, "/usr/bin/python3", "-c", SPY, s.hosts[0].addr, str(MASTER_PORT)],
        timeout=60,
        input=json.dumps([*SECRETS.values(), TOKEN]).encode(),
        capture_output=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(package)},
    )
    assert done.returncode == 0, done.stderr.decode()
    return json.loads(done.stdout)


def _needs_other_user_tools() -> None:
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv is not installed (Debian: util-linux)")
    if not os.path.exists("/usr/bin/python3"):
        pytest.skip("no system /usr/bin/python3 for the second user")


@pytest.mark.parametrize("launcher", ["ssh", "pdsh"])
def test_a_second_user_sees_no_secret_and_cannot_use_the_jobs_store(tmp_path, launcher) -> None:
    _needs_other_user_tools()
    if launcher == "pdsh" and shutil.which("pdsh") is None:
        pytest.skip("pdsh is not installed (Debian: pdsh)")
    home = tmp_path / "home"
    home.mkdir()
    (home / ".deepspeed_env").write_text(f"DS_SECRET={SECRETS['DS_SECRET']}\n")
    (home / ".deepspeed_env").chmod(0o600)
    with site(tmp_path, hosts=2) as s, readable_package() as package:
        hostfile = s.hostfile("h0 slots=1\nh1 slots=1\n")
        argv = s.argv(
            hostfile,
            "--launcher",
            launcher,
            "--export",
            "WANDB_API_KEY",
            "--master",
            f"{s.hosts[0].addr}:{MASTER_PORT}",
            script_args=["--sleep", "120"],
        )
        env = {
            **os.environ,
            "HOME": str(home),
            "WANDB_API_KEY": SECRETS["WANDB_API_KEY"],
            "PADDLIKE_JOB_TOKEN": TOKEN,
        }
        proc = s.login.popen(
            argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        try:
            assert proc.stdout is not None
            started = 0
            for line in proc.stdout:  # both hosts' workers run: the whole job is up
                started += b"] RANK " in line
                if started == 2:
                    break
            assert started == 2, proc.stderr.read().decode() if proc.stderr else ""
            found = _spy(s, package)
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=60)
        assert found["seen"] == []
        assert found["store"].startswith("refused"), found
        assert proc.returncode == 143, err.decode()  # ended by us, not by uid 4242's abort
        assert b"injected by uid 4242" not in err
        assert s.leftovers() == {}
    assert not list(home.glob(".paddlike-run-*"))  # pdsh's run files: removed


# Every kind of argument a login shell would mangle, in one job.
HOSTILE = [
    "x\\'$(touch F)\" #",
    "x'$(touch F)\" #",
    "`touch F`",
    "a\nb",
    "!!",
    "",
    "$HOME",
    "back\\slash",
    "%h",
    "a b",
]
ARGV_WORKER = "import json, sys; print('ARGV', json.dumps(sys.argv[1:]), flush=True)\n"


@contextlib.contextmanager
def shell_site(tmp_path: Path, shell: str) -> Iterator[Site]:
    """`site` with `shell` as root's login shell on every host: a passwd of the host's own
    (`ip netns exec` mounts /etc/netns/NS/passwd over /etc/passwd for its sshd)."""
    from tests.support.netns import netns_cluster
    from tests.support.sshd import ssh_cluster

    path = shutil.which(shell)
    if path is None:
        pytest.skip(f"{shell} is not installed (Debian: apt-get install {shell})")
    lines = Path("/etc/passwd").read_text().splitlines()
    passwd = "".join(
        (":".join([*line.split(":")[:6], path]) if line.startswith("root:") else line) + "\n"
        for line in lines
    )
    with netns_cluster(2, ["login", "h0"]) as cluster:
        for node in cluster.nodes[1:]:
            (Path("/etc/netns") / node.netns / "passwd").write_text(passwd)
        with ssh_cluster(cluster, cluster.nodes[1:]) as ssh:
            worker = tmp_path / "argv_worker.py"
            worker.write_text(ARGV_WORKER)
            yield Site(cluster, cluster.nodes[0], cluster.nodes[1:], ssh, tmp_path, worker)


@pytest.mark.parametrize("launcher", ["ssh", "pdsh"])
@pytest.mark.parametrize("shell", ["sh", "bash", "dash", "fish", "tcsh"])
def test_every_argument_arrives_as_written_whatever_the_login_shell(
    tmp_path, shell, launcher
) -> None:
    if launcher == "pdsh" and shutil.which("pdsh") is None:
        pytest.skip("pdsh is not installed (Debian: pdsh)")
    with shell_site(tmp_path, shell) as s:
        login_shell = s.hosts[0].run(
            ["ssh", "-F", str(s.ssh.config), "h0", "echo $SHELL"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert login_shell.stdout.strip() == shutil.which(shell)  # the test tests that shell
        hostfile = s.hostfile("h0 slots=1\n")
        env = {**os.environ, "ODD": HOSTILE[0] + "\n!!"}
        argv = s.argv(hostfile, "--launcher", launcher, "--export", "ODD", script_args=HOSTILE)
        done = s.login.run(argv, timeout=90, capture_output=True, text=True, cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        (line,) = [x for x in done.stdout.splitlines() if x.startswith("[h0] ARGV ")]
        # DeepSpeed's --local_rank=N first, as its launcher gives it on every host
        assert json.loads(line.removeprefix("[h0] ARGV ")) == ["--local_rank=0", *HOSTILE]
        assert not (tmp_path / "F").exists() and not (Path.home() / "F").exists()
        assert s.leftovers() == {}


def test_sigterm_while_ssh_reads_its_config_leaves_no_directory_and_no_process(tmp_path) -> None:
    """`ssh -G` runs a config's Match exec: here one that waits; SIGTERM meanwhile."""
    marker = tmp_path / "in-ssh-G"
    config = tmp_path / "ssh_config"
    # `; true` after the sleep: the shell stays (naming the marker) and is not replaced
    # by `sleep`, so a Match exec left running by any ssh of the starter is found below
    config.write_text(f'Match exec "touch {marker}; sleep 60; true"\n  Port 22\n')
    (tmp_path / "hf").write_text("h0\n")
    (tmp_path / "train.py").write_text("")
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen(
        [*LAUNCH, "--hostfile", "hf", f"--ssh_args=-F {config}", "train.py"],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(marker, proc)
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, err
    assert err.strip() == "paddlike.launch: SIGTERM: stopped before the job started on any host"
    assert not list(tmp_path.glob("paddlike-ssh-*"))
    assert _processes_naming(str(marker)) == []


@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGTERM])
def test_a_signal_during_pdshs_check_ends_its_master_connections_and_run_files(
    tmp_path, signum
) -> None:
    """h0 passes pdsh's check (its master connection stays, its run file is written); h1's
    ssh hangs in its ProxyCommand; the signal then: nothing of the job is left anywhere."""
    if shutil.which("pdsh") is None:
        pytest.skip("pdsh is not installed (Debian: pdsh)")
    short = Path(tempfile.mkdtemp(prefix="plk-t-"))  # the starter's TMPDIR: ssh's socket
    # path must stay under 108 bytes
    with contextlib.ExitStack() as cleanup, site(tmp_path, hosts=2, sshd_on=[0]) as s:
        cleanup.callback(shutil.rmtree, short, ignore_errors=True)
        marker = tmp_path / "h1-connecting"
        config = tmp_path / "ssh_config"
        config.write_text(
            f"Host h1\n  ProxyCommand sh -c 'touch {marker}; exec sleep 60'\n"
            + s.ssh.config.read_text()
        )
        hostfile = s.hostfile("h0 slots=1\nh1 slots=1\n")
        argv = s.argv(hostfile, "--launcher", "pdsh")
        argv[argv.index(s.ssh.ssh_args)] = f"--ssh_args=-F {config}"
        proc = s.login.popen(
            argv, cwd=REPO, env={**os.environ, "TMPDIR": str(short)}, stderr=subprocess.PIPE
        )
        try:
            _wait_for(marker, proc)
            _wait_for_socket(short, proc)  # h0's master connection is up
            proc.send_signal(signum)
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        name = signal.Signals(signum).name
        assert proc.returncode == 128 + signum, err.decode()
        assert err.decode().strip() == (
            f"paddlike.launch: {name}: stopped before the job started on any host"
        )
        assert not list(short.glob("paddlike-ssh-*"))
        assert _processes_naming(str(short / "paddlike-ssh-")) == []  # no master left
        assert _processes_naming(str(marker)) == []  # nor h1's ProxyCommand
        assert not list(Path(pwd.getpwuid(0).pw_dir).glob(".paddlike-run-*-h0.sh"))
        assert s.leftovers() == {}


def _wait_for_socket(tmp: Path, proc: subprocess.Popen, timeout: float = 60) -> None:
    """Until ssh's master socket is made under `tmp`, failing if the starter ends first."""
    _wait_for_files(lambda: list(tmp.glob("paddlike-ssh-*/*")), tmp, proc, timeout, "h0's master")


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 60) -> None:
    _wait_for_files(path.exists, path.parent, proc, timeout, "ssh -G's Match exec")


def _wait_for_files(
    ready: Callable[[], object], under: Path, proc: subprocess.Popen, timeout: float, what: str
) -> None:
    if not wait_until(ready, under=under, timeout=timeout, what=what, writer=proc):
        pytest.fail(f"the starter exited {proc.returncode} before {what}: {proc.communicate()[1]}")


def _processes_naming(text: str, timeout: float = 10) -> list[str]:
    """The command lines naming `text` still running `timeout` s after the check began: a
    group just sent SIGKILL takes a moment to go (seen on a loaded CI machine)."""
    found: dict[int, str] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            if text in cmdline and int(pid) != os.getpid():
                found[int(pid)] = cmdline
    return [found[pid] for pid in wait_exited(list(found), timeout=timeout)]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
