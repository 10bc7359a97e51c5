"""The directory a node takes inside a log directory another node of its job holds (a
shared home) is named by its address, without colons: `log/fd00_198_18__1/` for an IPv6
host, so that scp, rsync and make can name it (they read ':' as a separator)."""

from __future__ import annotations

from pathlib import Path

import pytest

from paddlike.launch.run.logdir import JobClaim, LogDir

pytestmark = pytest.mark.timeout(30)

JOB = JobClaim.of(job_id="j", meeting="[fd00:198:18::1]:6170", fingerprint={"script": "t.py"})


@pytest.mark.parametrize(
    ("host", "name"),
    [
        ("198.18.0.2", "198.18.0.2"),
        ("fd00:198:18::2", "fd00_198_18__2"),
        ("::1", "__1"),
        ("fe80::1%eth0", "fe80__1_eth0"),
        ("node-b", "node-b"),
    ],
)
def test_a_second_node_of_the_job_takes_a_directory_named_without_colons(
    tmp_path: Path, host: str, name: str
) -> None:
    with (
        LogDir.open(tmp_path, overwrite=False, host="fd00:198:18::1", job=JOB) as first,
        LogDir.open(tmp_path, overwrite=False, host=host, job=JOB) as second,
    ):
        assert first.path == tmp_path
        assert second.path == tmp_path / name
        assert ":" not in second.path.name
