"""`logformat.write_atomically` on a full disk: a 256 KiB tmpfs in a private mount namespace
(`unshare -m`), filled up, then written to. Nothing half-written is left; endpoints.log
fails naming its path; summary.json's last word lands in place, in the room its earlier
write kept, also when it is longer than that write (a restart's summary is)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)

SCRIPT = r"""
import errno, json, sys
from pathlib import Path
from paddlike.logformat import write_atomically

d = Path(sys.argv[1])
target = d / "summary.json"
write_atomically(target, b"running\n", in_place_when_full=True)  # as a summary's first write
out = {"room": target.stat().st_blocks * 512, "size": target.stat().st_size}
try:
    with open(d / "fill", "wb") as f:
        while True:
            f.write(b"\0" * 4096)
            f.flush()
except OSError:
    pass
try:
    write_atomically(target, b"finished: the job's cause\n")
    out["plain"] = "written"
except OSError as exc:
    out["plain"] = [exc.errno == errno.ENOSPC, exc.filename]
out["plain_kept"] = target.read_text()
last = b"finished: the job's cause\n" + b"r" * 20000 + b"\n"  # 5 pages: longer than before
write_atomically(target, last, in_place_when_full=True)
out["in_place"] = target.read_text()
out["room_after"] = target.stat().st_blocks * 512
try:  # the room stays the summary's: the disk is as full as before
    write_atomically(d / "endpoints.log", b"endpoints\n")
    out["still_full"] = False
except OSError as exc:
    out["still_full"] = exc.errno == errno.ENOSPC
try:
    write_atomically(target, b"x" * 300000, in_place_when_full=True)  # more than it holds
    out["too_big"] = "written"
except OSError as exc:
    out["too_big"] = exc.errno == errno.ENOSPC
out["after_too_big"] = target.read_text()
out["left"] = sorted(p.name for p in d.iterdir())
print(json.dumps(out))
"""


def test_a_full_disk_leaves_no_temporary_file_and_the_summary_gets_its_last_word(tmp_path):
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a tmpfs in a private mount namespace needs root and unshare")
    disk = tmp_path / "disk"
    disk.mkdir()
    mount = f"mount -t tmpfs -o size=256k tmpfs '{disk}'"
    shell = f"{mount} && exec '{sys.executable}' -c \"$0\" '{disk}'"
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", shell, SCRIPT],
        capture_output=True, text=True, timeout=30, check=False,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["plain"] == [True, str(disk / "summary.json")]  # named, like endpoints.log's
    assert out["plain_kept"] == "running\n"  # the old file whole
    assert (out["size"], out["room"]) == (8, 64 * 1024)  # its bytes, and room kept after them
    assert out["in_place"] == "finished: the job's cause\n" + "r" * 20000 + "\n"
    assert out["room_after"] == 64 * 1024 and out["still_full"] is True  # nothing freed
    assert out["too_big"] is True and out["after_too_big"] == out["in_place"]  # untouched
    assert out["left"] == ["fill", "summary.json"]  # no .summary.json.PID.tmp
    assert list(disk.iterdir()) == []  # the tmpfs went with its namespace
