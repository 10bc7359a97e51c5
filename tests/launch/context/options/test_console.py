"""options/console.py: what the console shows for paddlike's --console and torchrun's
-t/--tee, -r/--redirects and --local_ranks_filter; torchtitan's command line end to end."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from paddlike.launch.context.options import UsageError, parse_options
from paddlike.launch.context.options.console import choose, std, streams

ROOT = Path(__file__).resolve().parents[4]


@pytest.mark.parametrize(
    ("text", "value"),
    [("0", 0), ("3", 3), (" 1 ", 1), ("all", 3), ("0:3,1:1", {0: 3, 1: 1}), ("2:0", {2: 0})],
)
def test_torchruns_std_values_and_per_rank_maps(text, value):
    assert std(text) == value


@pytest.mark.parametrize("text", ["4", "-1", "x", "0:4", "a:3", "0,1", ""])
def test_other_std_values_are_refused(text):
    with pytest.raises(ValueError, match=r"expected 0 \(none\), 1 \(stdout\), 2 \(stderr\)"):
        std(text)


@pytest.mark.parametrize(
    ("console", "tee", "redirects", "nproc", "shown"),
    [
        (None, None, None, None, "0"),
        ("all", None, None, None, "all"),
        (None, "3", None, None, "all"),
        (None, "0", None, None, "all"),
        ("0", "3", None, None, "0"),
        (None, None, "3", None, "none"),
        (None, "0:3", "3", None, "0"),
        (None, "3", "3", None, "all"),
        (None, "1", "1", None, "all"),
        (None, "0:3,1:3", "3", None, "0,1"),
        (None, None, "1:3", 3, "0,2"),
        ("1,2", None, "1:3", None, "2"),
        ("2", None, "0:1", None, "2"),  # rank 0 would show one stream, but it is not shown
        (None, "none", None, None, "none"),
    ],
)
def test_the_console_choice_is_torchruns_rule(console, tee, redirects, nproc, shown):
    t = (tee, "--tee") if tee is not None else None
    r = (redirects, "--redirects") if redirects is not None else None
    assert choose(console, t, r, nproc) == shown


@pytest.mark.parametrize(
    ("tee", "redirects", "shown", "console"),
    [
        (None, "2", ((-1, 1),), "all"),  # stderr to the files only: stdout on the console
        (None, "1", ((-1, 2),), "all"),
        (None, "0:2", ((-1, 3), (0, 1)), "all"),
        ("0:3", "2", ((-1, 1), (0, 3)), "all"),  # rank 0 teed whole, the rest stdout only
        (None, "0:2,1:3", ((-1, 3), (0, 1), (1, 0)), None),  # rank 1 hidden: needs nproc
        ("3", "3", (), "all"),
        (None, "3", (), "none"),
        ("none", None, (), "none"),
    ],
)
def test_one_stream_of_a_worker_on_the_console_is_chosen_per_local_rank(
    tee, redirects, shown, console
):
    t = (tee, "--tee") if tee is not None else None
    r = (redirects, "-r") if redirects is not None else None
    assert streams(t, r) == shown
    if console is not None:
        assert choose(None, t, r, None) == console


def test_a_map_that_hides_some_ranks_and_shows_the_rest_needs_the_rank_count():
    with pytest.raises(UsageError, match=r"^-r: '0:2,1:3' keeps some local ranks off") as err:
        choose(None, None, ("0:2,1:3", "-r"), None)
    assert err.value.option == "--redirects"
    assert choose(None, None, ("0:2,1:3", "-r"), 3) == "0,2"


def test_one_stream_shown_keeps_the_streams_in_two_files():
    o = parse_options(["-r", "2", "t.py"], {})
    assert o.redirect_stdout_and_stderr and o.console_streams == ((-1, 1),)
    assert not parse_options(["-r", "3", "-t", "3", "t.py"], {}).redirect_stdout_and_stderr


TRAIN = """
import os, sys
rank = os.environ["RANK"]
print(f"[titan] rank {rank} of {os.environ['WORLD_SIZE']} role {os.environ['ROLE_NAME']} "
      f"args {' '.join(sys.argv[1:])}", flush=True)
print(f"[titan] rank {rank} says something on stderr", file=sys.stderr, flush=True)
"""


def _titan(tmp_path: Path, *tee: str) -> subprocess.CompletedProcess[str]:
    """torchtitan's run_train.sh, with our small module in place of torchtitan.train."""
    pkg = tmp_path / "titanish"
    pkg.mkdir(exist_ok=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text(TRAIN)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLIKE_", "PET_"))}
    argv = [sys.executable, "-m", "paddlike.launch", "--nproc_per_node=2",
            "--rdzv_backend", "c10d", "--rdzv_endpoint=localhost:0",
            "--local-ranks-filter", "0", "--role", "rank", *tee,
            "-m", "titanish.train", "--job.config_file", "debug_model.toml"]  # fmt: skip
    return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60)  # fmt: skip


@pytest.mark.timeout(90)
@pytest.mark.parametrize("tee", [["--tee", "3"], ["-t", "3"]])
def test_torchtitans_command_line_shows_local_rank_0_and_logs_every_rank(tmp_path, tee):
    run = _titan(tmp_path, *tee)
    assert run.returncode == 0, run.stdout + run.stderr
    # local rank 0 on the console, both of its streams; rank 1 only in its log file
    assert run.stdout.splitlines() == [
        "[titan] rank 0 of 2 role rank args --job.config_file debug_model.toml",
        "[titan] rank 0 says something on stderr",
    ]
    assert "error" not in run.stderr and "warning" not in run.stderr
    log1 = (tmp_path / "log" / "workerlog.1").read_text()
    assert "[titan] rank 1 of 2 role rank args --job.config_file debug_model.toml" in log1
    assert "[titan] rank 1 says something on stderr" in log1


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    ("option", "console", "file_only"),
    [
        (["-r", "2"], "says something on stdout", "says something on stderr"),
        (["--redirects", "1"], "says something on stderr", "says something on stdout"),
    ],
)
def test_torchruns_redirect_of_one_stream_keeps_it_off_the_console(
    tmp_path, option, console, file_only
):
    script = tmp_path / "t.py"
    script.write_text(
        "import sys\n"
        "print('says something on stdout', flush=True)\n"
        "print('says something on stderr', file=sys.stderr, flush=True)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLIKE_", "PET_"))}
    run = subprocess.run(
        [sys.executable, "-m", "paddlike.launch", "--log_dir", str(tmp_path / "log"), *option,
         str(script)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert console in run.stdout and file_only not in run.stdout
    log = tmp_path / "log"
    both = (log / "workerlog.0").read_text() + (log / "workerlog.0.err").read_text()
    assert console in both and file_only in both


@pytest.mark.parametrize(("text", "rank"), [("0:3,0:1", 0), ("1:1, 2:3,1:3", 1)])
def test_a_local_rank_listed_twice_in_a_map_is_refused(text, rank):
    with pytest.raises(ValueError, match=rf"^local rank {rank} is listed twice, got "):
        std(text)


def test_a_worker_listed_twice_in_console_is_refused():
    with pytest.raises(UsageError, match=r"^--console: local worker 0 is listed twice, got '0,0'$"):
        parse_options(["--console", "0,0", "train.py"], {})


def test_the_ranks_a_map_names_are_kept_with_the_option_that_names_them():
    o = parse_options(["-t", "0:3,2:1", "-r", "1:2", "train.py"], {})
    assert o.console_ranks == (("-t", 0), ("-t", 2), ("-r", 1))


def _dry_run(tmp_path: Path, *argv: str, **environ: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "train.py").write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLIKE_", "PET_"))}
    return subprocess.run(
        [sys.executable, "-m", "paddlike.launch", "--nproc_per_node", "2", *argv, "--dry_run",
         "train.py"],
        cwd=tmp_path, env={**env, **environ}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    ("argv", "environ", "message"),
    [(["--console", "3"], {}, "--console: this node runs 2 trainer(s) "
      "(local indices 0..1), got '3'"),
     (["-t", "2:3"], {}, "-t: this node runs 2 trainer(s) (local indices 0..1), got local rank 2"),
     ([], {"PET_REDIRECTS": "0:3,5:1"}, "--redirects (from PET_REDIRECTS): this node runs 2 "
      "trainer(s) (local indices 0..1), got local rank 5")],
)  # fmt: skip
def test_a_local_rank_the_node_does_not_run_is_refused_by_every_console_option(
    tmp_path, argv, environ, message
):
    run = _dry_run(tmp_path, *argv, **environ)
    assert run.returncode == 2 and run.stderr == f"paddlike.launch: error: {message}\n"
