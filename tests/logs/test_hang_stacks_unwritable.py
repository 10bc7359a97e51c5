"""A stack dump that cannot be written (a file in place of stacks/, a read-only or full
disk) is a warning naming the path: the hang is still handled as usual, from the stacks
in memory (exit 124, the report, summary.json's end)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from paddlike.logs.stack_files import write_dump

pytestmark = pytest.mark.timeout(60)

HANG = "import time\nprint('up', flush=True)\ntime.sleep(50)\n"


def test_write_dump_warns_naming_the_path_and_returns(tmp_path, capsys):
    (tmp_path / "stacks").write_text("not a directory\n")
    path = write_dump(tmp_path, {}, ["rank 1 is stopped"], when=0.0)
    assert path.parent == tmp_path / "stacks"
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1
    assert f": warning: cannot write the stacks to {tmp_path}/stacks" in err[0]
    assert err[0].endswith("the report is from the stacks in memory")


NO_OVERRIDE = "-dac_override,-dac_read_search,-fowner"


@pytest.mark.parametrize("blocked", ["a file in its place", "read-only for a user"])
def test_a_hang_with_an_unwritable_stacks_directory_still_ends_124_with_its_report(
    tmp_path, blocked
):
    log = tmp_path / "log"
    log.mkdir()
    prefix: list[str] = []
    if blocked == "a file in its place":
        (log / "stacks").write_text("a file where the dumps would go\n")
    else:  # the case: root without its permission override, as a user is
        if os.geteuid() != 0 or shutil.which("setpriv") is None:
            pytest.skip("needs root and setpriv to drop the permission override")
        (log / "stacks").mkdir(mode=0o555)
        (log / "stacks").chmod(0o555)
        prefix = ["setpriv", f"--inh-caps={NO_OVERRIDE}", f"--bounding-set={NO_OVERRIDE}"]
    script = tmp_path / "hang.py"
    script.write_text(HANG)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLIKE_", "PET_"))}
    done = subprocess.run(
        [*prefix, sys.executable, "-m", "paddlike.launch", "--nproc_per_node", "2",
         "--log_dir", str(log), "--hang_timeout", "2", "--on_hang", "abort",
         "--kill_timeout", "2", str(script)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=50,
    )  # fmt: skip
    assert done.returncode == 124, done.stderr
    assert "Traceback" not in done.stderr
    warned = [ln for ln in done.stderr.splitlines() if "cannot write the stacks" in ln]
    assert len(warned) == 1 and warned[0].startswith(
        f"paddlike.launch: warning: cannot write the stacks to {log}/stacks"
    ), done.stderr
    assert any(ln.startswith("FAILED: ") for ln in done.stderr.splitlines()), done.stderr
    # and it does not claim a dump that is not there
    assert "(not written to the log directory: see the warning above)" in done.stderr
    summary = json.loads((log / "summary.json").read_text())
    assert (summary["status"], summary["exit_code"]) == ("failed", 124)
    if blocked == "a file in its place":
        assert Path(log / "stacks").read_text() == "a file where the dumps would go\n"
    else:
        assert list((log / "stacks").iterdir()) == []
