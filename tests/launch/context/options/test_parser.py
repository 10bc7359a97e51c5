"""options/parser.py: the option table; the fast parse agrees with argparse, which is
built from the same table only for --help and for what the fast parse does not take."""

from __future__ import annotations

import subprocess
import sys

import pytest

from paddlike.launch.context.options import UsageError
from paddlike.launch.context.options.parser import build_parser, parse_ours, split_argv

CLEAN = [
    [],
    ["--ips", "a,b", "--nproc_per_node", "2"],
    ["--ips=a", "--ips", "b"],  # the last wins
    ["-m", "--no_python", "--dry_run", "--log_overwrite", "--redirect_stdout_and_stderr"],
    ["--devices", "cpu", "--selected_gpus", "0"],
    ["--log_dir", "", "--job_id", "x"],
    ["--console", "all", "--local_ranks_filter", "0"],
]


@pytest.mark.parametrize("ours", CLEAN)
def test_the_fast_parse_reads_what_argparse_reads(ours):
    fast = parse_ours(ours)
    parsed = vars(build_parser().parse_args(ours)).items()
    slow = {k: v for k, v in parsed if v is not None and not k.startswith("torchrun_")}
    slow.pop("training_script_args")
    assert fast == slow


@pytest.mark.parametrize(
    ("ours", "message"),
    [
        (["--ips"], r"^--ips: expected one argument$"),
        (["--ips", "-x"], r"^--ips: expected one argument$"),
        (["--dry_run=1"], r"^--dry_run: ignored explicit argument '1'$"),
        (["--nope"], r"^--nope: unknown option \(see --help\)$"),
    ],
)
def test_what_the_fast_parse_does_not_take_gets_argparses_own_error(ours, message):
    with pytest.raises(UsageError, match=message):
        parse_ours(ours)


def test_the_split_stops_at_the_script_and_writes_out_spellings_and_prefixes():
    ours, script = split_argv(["--nproc-per-node", "2", "--max_rest=1", "t.py", "--nproc", "9"])
    assert ours == ["--nproc_per_node", "2", "--max_restarts=1"]
    assert script == ["t.py", "--nproc", "9"]


def test_a_launch_does_not_import_argparse(tmp_path):
    (tmp_path / "t.py").write_text("pass\n")
    code = (
        "import sys; from paddlike.launch.main import describe; "
        "describe(['--dry_run', '--nproc_per_node', '2', '--tee', '3', 't.py'], {}); "
        "print('argparse' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert out.stdout.strip() == "False", out.stderr
