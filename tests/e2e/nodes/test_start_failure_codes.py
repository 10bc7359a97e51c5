"""One cause, one exit code on every node: a node that cannot start tells the others its
own code with its line, so a name that never resolves there (exit 1 on that node, as a
rendezvous that timed out) ends the node it tells with exit 1 too, not 2."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.nodes.test_start import clean_env
from tests.support.netns import LOCALHOST, netns_cluster

pytestmark = pytest.mark.netns

LAUNCH = [sys.executable, "-m", "paddlike.launch"]


@pytest.mark.timeout(120)
def test_a_name_that_never_resolves_on_node_1_ends_node_0_with_the_same_exit_1(tmp_path: Path):
    (tmp_path / "train.py").write_text("print('ran')\n")
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        a, b = cluster.nodes
        b.hosts_path.write_text(LOCALHOST + f"{a.addr} nodea\n")  # node b cannot name itself

        def launcher(node, timeout: str) -> subprocess.Popen[bytes]:
            argv = [*LAUNCH, "--ips", "nodea,nodeb", "--rdzv_timeout", timeout,
                    "--log_dir", str(tmp_path / node.hostname), "train.py"]  # fmt: skip
            return node.popen(
                argv,
                cwd=tmp_path,
                env=clean_env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )

        pa = launcher(a, "60")
        pb = launcher(b, "2")
        out_b = pb.communicate(timeout=60)[0].decode()
        ended = time.monotonic()
        out_a = pa.communicate(timeout=60)[0].decode()
        gap = time.monotonic() - ended
    assert (pa.returncode, pb.returncode) == (1, 1), (out_a, out_b)
    assert "--ips: 'nodeb' still does not resolve after 2 s" in out_b, out_b
    assert "could not start: --ips: 'nodeb' still does not resolve" in out_a, out_a
    assert "never joined" not in out_a, out_a
    assert gap < 5, (gap, out_a)
