"""Spares (issue 35): a hostfile with more hosts than --num_nodes. Which hosts are spares
(the pre-flight check on, ssh), and who runs from the check-only launchers' exit codes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from paddlike.launch.cluster.selection import Pick, spare_count
from paddlike.launch.cluster.spares import Choice, check_job, choice_line, choose, chosen_job
from paddlike.launch.health.choose import CHECK_ONLY_ENV, CHOSEN_ENV, check_only
from tests.launch.cluster.test_start import _plan

LAUNCH = [sys.executable, "-m", "paddlike.launch"]
HOSTS = ("h0", "h1", "h2", "h3")
PICKS = tuple(Pick(h, 1) for h in HOSTS)


@pytest.mark.parametrize(
    ("num_nodes", "preflight", "launcher", "spares"),
    [
        (2, None, None, 2),  # the check on by default for more than one node
        (2, "on", "ssh", 2),
        (2, "full", None, 2),
        (2, "off", None, 0),  # the first N hosts, as DeepSpeed's --num_nodes
        (1, None, None, 0),  # one node: no check by default
        (1, "on", None, 3),
        (4, None, None, 0),  # every host runs
        (None, None, None, 0),
        (2, None, "pdsh", 0),  # pdsh cannot hold its hosts for a choice: the first N
        (2, None, "slurm", 0),
    ],
)
def test_which_hosts_are_spares(num_nodes, preflight, launcher, spares) -> None:
    assert spare_count(PICKS, num_nodes, preflight, launcher) == spares


def test_a_hostfile_with_spares_keeps_every_host_and_off_keeps_the_first_n(tmp_path) -> None:
    text = "h0 slots=1\nh1 slots=1\nh2 slots=1\n"
    job = _plan(tmp_path, text, "--num_nodes", "2")
    assert job.hosts == ("h0", "h1", "h2") and job.spares == 1 and job.nodes == 2
    off = _plan(tmp_path, text, "--num_nodes", "2", "--preflight", "off")
    assert off.hosts == ("h0", "h1") and off.spares == 0 and off.nodes == 2
    checked = check_job(job)
    assert check_only(checked.environment) and not check_only(job.environment)
    assert checked.environment[CHECK_ONLY_ENV] == "1"


@pytest.mark.parametrize(
    ("codes", "choice"),
    [
        ({"h0": 0, "h1": 0, "h2": 0, "h3": 0}, Choice(("h0", "h1"), (), ("h2", "h3"))),
        ({"h0": 0, "h1": 69, "h2": 0, "h3": 0}, Choice(("h0", "h2"), ("h1",), ("h3",))),
        ({"h0": 69, "h1": 0, "h2": 69, "h3": 0}, Choice(("h1", "h3"), ("h0", "h2"), ())),
    ],
)
def test_the_first_n_healthy_hosts_run_in_the_hostfiles_order(codes, choice) -> None:
    assert choose(HOSTS, codes, 2) == choice


def test_fewer_healthy_hosts_than_num_nodes_start_nothing_and_exit_2() -> None:
    choice = choose(HOSTS, {"h0": 0, "h1": 69, "h2": 69, "h3": 69}, 2)
    code, line = choice.refusal
    assert code == 2
    assert "1 of the 4 hosts are healthy, fewer than --num_nodes 2" in line
    assert "left out: h1, h2, h3; nothing was started" in line


@pytest.mark.parametrize("code", [2, 255, 130, None])
def test_a_check_that_did_not_finish_on_a_host_starts_nothing_with_its_code(code) -> None:
    choice = choose(HOSTS, {"h0": 0, "h1": 0, "h2": code, "h3": 0}, 2)
    assert choice.refusal is not None
    assert choice.refusal[0] == (code or 1)
    assert choice.refusal[1].startswith(
        f"host h2: the pre-flight check did not finish there (exit {code}"
    )


def test_the_chosen_job_keeps_the_chosen_hosts_picks_and_names(tmp_path) -> None:
    job = _plan(tmp_path, "h0 slots=1\nh1 slots=2\nh2 slots=3\n", "--num_nodes", "2")
    job = job._replace(addresses=("10.0.0.1", "10.0.0.2", "10.0.0.3"))
    chosen = chosen_job(job, Choice(("h0", "h2"), ("h1",), ()))
    assert chosen.hosts == ("h0", "h2") and chosen.spares == 0
    assert chosen.addresses == ("10.0.0.1", "10.0.0.3")
    assert [p.workers for p in chosen.picks] == [1, 3]
    assert chosen.environment[CHOSEN_ENV].startswith("pre-flight check: the job runs on h0, h2")
    line = choice_line(Choice(("h0", "h2"), ("h1",), ()), 2)
    assert line.startswith("pre-flight check: the job runs on h0, h2 (--num_nodes 2); left out")
    assert "standing by: none" in line


def _dry_run(tmp_path, *args: str):
    (tmp_path / "hf").write_text("h0 slots=1\nh1 slots=1\nh2 slots=1\n")
    argv = [*LAUNCH, "--hostfile", str(tmp_path / "hf"), "--dry_run", *args, "train.py"]
    env = {**os.environ, "HOME": str(tmp_path)}
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env)


def test_dry_run_shows_the_check_of_every_host_then_says_n_of_them_run(tmp_path) -> None:
    done = _dry_run(tmp_path, "--num_nodes", "2")
    assert done.returncode == 0, done.stderr
    hosts = {line.split()[0] for line in done.stdout.splitlines() if line.startswith("[")}
    assert hosts == {"[h0]", "[h1]", "[h2]"}
    assert f"[h2]   export {CHECK_ONLY_ENV}=1" in done.stdout  # paddlike's own: shown
    assert done.stdout.splitlines()[-1].startswith(
        "# then the job starts on the first 2 of these 3 hosts that pass the pre-flight check"
    )
    off = _dry_run(tmp_path, "--num_nodes", "2", "--preflight", "off")
    assert off.returncode == 0, off.stderr
    assert "[h2]" not in off.stdout and CHECK_ONLY_ENV not in off.stdout
