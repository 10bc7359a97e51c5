"""docs/cli.md stays true: every option `--help` lists is documented, with its variable."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CLI_DOC = ROOT / "docs" / "cli.md"


def launcher_help() -> str:
    """`python -m paddlike.launch --help`, or the parser's own help before __main__ exists."""
    if importlib.util.find_spec("paddlike.launch.__main__") is not None:
        proc = subprocess.run(
            [sys.executable, "-m", "paddlike.launch", "--help"],
            capture_output=True,
            text=True,
            timeout=30,
            cwd=ROOT,
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout
    from paddlike.launch.context.options import build_parser

    return build_parser().format_help()


def help_options(text: str) -> set[str]:
    names = re.findall(r"(?<![\w-])(--?[a-z][a-z0-9_]*(?:-[a-z0-9_]+)*)", text)
    return set(names) - {"-h", "--help"}


def test_every_option_in_help_appears_in_the_cli_reference():
    doc = CLI_DOC.read_text()
    options = help_options(launcher_help())
    assert "--ips" in options and "--log_dir" in options
    missing = sorted(o for o in options if f"`{o}`" not in doc)
    assert not missing, f"options in --help but not in docs/cli.md: {missing}"


def test_every_long_option_lists_its_environment_variable():
    doc = CLI_DOC.read_text()
    for line in doc.splitlines():
        match = re.match(r"\| `(--[a-z_]+)`", line)
        if match and "PADDLIKE_" in line:
            name = "PADDLIKE_" + match.group(1)[2:].upper()
            assert f"`{name}`" in line, line


def test_every_option_row_names_all_its_spellings_and_quotes_its_help_text():
    """The tables are the parser's: a changed help text or a new alias shows up here."""
    from paddlike.launch.context.options import build_parser

    rows = {}
    for line in CLI_DOC.read_text().splitlines():
        match = re.match(r"\| (`-[^|]*) \|", line)
        if match:
            rows[frozenset(re.findall(r"`(-[^`]+)`", match.group(1)))] = line
    for group in build_parser()._action_groups:
        for action in group._group_actions:
            if not action.option_strings or action.dest == "help":
                continue
            spellings = frozenset(action.option_strings)
            assert spellings in rows, f"no row naming exactly {sorted(spellings)}"
            assert f"| {action.help} |" in rows[spellings], rows[spellings]


def test_every_help_group_is_a_section_of_the_reference():
    from paddlike.launch.context.options import build_parser

    doc = CLI_DOC.read_text()
    for group in build_parser()._action_groups:
        if any(a.option_strings and a.dest != "help" for a in group._group_actions):
            assert f"## {group.title}\n" in doc, group.title


@pytest.mark.parametrize(
    "page",
    [
        "quickstart.md",
        "cli.md",
        "environment.md",
        "logdir.md",
        "collective.md",
        "ps.md",
        "migrating.md",
        "troubleshooting.md",
    ],
)
def test_doc_page_exists_and_its_relative_links_resolve(page):
    path = ROOT / "docs" / page
    text = path.read_text()
    for target, anchor in re.findall(r"\]\(([^)#:]*)(?:#([^)]*))?\)", text):
        linked = path.parent / target if target else path
        assert linked.exists(), f"{page} links to missing {target}"
        if anchor and linked.suffix == ".md":
            assert anchor in _anchors(linked.read_text()), f"{page} links to {target}#{anchor}"


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading ids: lower case, punctuation dropped, spaces to dashes."""
    return {
        re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        for title in re.findall(r"^#+ (.+)$", markdown, flags=re.MULTILINE)
    }


CONSOLE_SCRIPTS = ("paddlike-launch", "paddlike-logs")


def test_the_console_scripts_are_documented_and_are_the_setup_cfg_entry_points():
    setup = (ROOT / "setup.cfg").read_text()
    for name in CONSOLE_SCRIPTS:
        assert re.search(rf"^\s*{name} = ", setup, flags=re.MULTILINE), name
        assert f"`{name}`" in (ROOT / "README.md").read_text(), name
        assert f"`{name}`" in CLI_DOC.read_text(), name


@pytest.mark.timeout(90)
def test_the_documented_console_scripts_run_a_job_and_read_its_logs(tmp_path):
    bin_dir = Path(sys.executable).parent
    missing = [n for n in CONSOLE_SCRIPTS if not (bin_dir / n).exists()]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed next to {sys.executable} (pip install)")
    (tmp_path / "hello.py").write_text("import os; print('hello from rank', os.environ['RANK'])\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PADDLIKE_")}
    run = subprocess.run(
        [str(bin_dir / "paddlike-launch"), "--nproc_per_node", "2", "--console", "all",
         "--log_dir", "L", "hello.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert sorted(run.stdout.splitlines()) == ["[rank 0] hello from rank 0",
                                               "[rank 1] hello from rank 1"]  # fmt: skip
    logs = subprocess.run(
        [str(bin_dir / "paddlike-logs"), "L"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert logs.returncode == 0, logs.stderr
    assert "job succeeded: 2 processes on 1 node (2 ok)" in logs.stdout
    bad = subprocess.run(
        [str(bin_dir / "paddlike-launch"), "--nproc_per_node", "x", "hello.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert (bad.returncode, bad.stderr) == (
        2, "paddlike.launch: error: --nproc_per_node: expected a positive integer, got 'x'; "
        "or gpu, cpu, auto (as in torchrun)\n",
    )  # fmt: skip


@pytest.mark.parametrize("page", ["migrating.md", "ps.md"])
def test_paddle_s_ps_exit_code_is_told_per_launcher(page):
    """Only the fleet-era launcher exits 0 in PS mode after a trainer failed; Paddle 3.3.1's
    `paddle.distributed.launch` exits 241 (issue 32)."""
    text = " ".join((ROOT / "docs" / page).read_text().split())
    assert "Paddle's PS mode exits 0" not in text
    assert "fleet-era launcher" in text and "241" in text
