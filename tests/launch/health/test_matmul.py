"""`--preflight full`'s matrix multiply per GPU (issue 35): a child Python where CuPy
imports (here the suite's CuPy stand-in, tests/support/doubles: no GPU where the suite
runs), each GPU's rate against the job's median rate, in every node's figures."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from paddlike.launch.health.limits import Limits
from paddlike.launch.health.matmul import gpu_rates
from paddlike.launch.health.preflight import decode_report, encode_report
from paddlike.launch.health.verdict import NodeReport, judge

DOUBLES = str(Path(__file__).resolve().parents[2] / "support" / "doubles")


def _env(**more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, **more}


def test_each_gpu_gets_a_rate_where_cupy_imports():
    rates = gpu_rates(_env(PYTHONPATH=DOUBLES, CUPY_DOUBLE_GPUS="2"))
    assert rates is not None and len(rates) == 2
    assert all(r > 0 for r in rates)


def test_no_cupy_is_no_figure_and_the_launcher_never_imports_it():
    assert gpu_rates(_env()) is None  # (the suite's Python has no CuPy)
    assert "cupy" not in sys.modules or getattr(sys.modules["cupy"], "__paddlike_double__", 0)


def test_a_child_that_fails_is_no_figure_not_a_fault(tmp_path):
    fake = tmp_path / "cupy"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise SystemExit(9)\n")
    assert gpu_rates(_env(PYTHONPATH=str(tmp_path))) is None


def test_a_slow_gpu_is_named_with_its_rate_against_the_jobs_median():
    reports = [
        NodeReport(0, "10.0.0.1", rates=(40e12, 41e12)),
        NodeReport(1, "10.0.0.2", rates=(40e12, 12e12)),
        NodeReport(2, "10.0.0.3", rates=(39e12, 40e12)),
        NodeReport(3, "10.0.0.4"),  # no CuPy there: not compared
    ]
    verdict = judge(reports, Limits())
    assert verdict.bad_nodes == (1,)
    assert verdict.lines == ("node 1 (10.0.0.2): GPU 1: 12.0 TFLOP/s matmul, median 40.0 TFLOP/s",)
    assert judge(reports, Limits(matmul=0.25)).ok  # --preflight_limits matmul=0.25


def test_the_rates_travel_with_the_nodes_figures():
    report = NodeReport(2, "10.0.0.3", rates=(4.5e13, 4.4e13))
    assert decode_report(encode_report(report)).rates == (4.5e13, 4.4e13)
    assert decode_report(encode_report(NodeReport(1, "h"))).rates == ()
