"""`--preflight full`'s GPU check where CuPy is installed: a short float32 matrix multiply
on each GPU of this node, its rate set against the job's median rate (`verdict.judge`).

It runs in a child Python (`gpu_rates`), so the launcher itself never imports CuPy: the
child prints one rate per GPU (FLOP/s) as JSON, or exits `NO_CUPY` where CuPy does not
import or sees no GPU; anything else (a crash, the deadline) counts as no figure, never
as a fault. Each GPU multiplies for `SECONDS`, bounded, not a fixed count.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping

SECONDS = 0.2  # per GPU, after one warm-up product
SIZE = 2048  # n of the n x n float32 matrices (2 n^3 FLOP a product)
NO_CUPY = 3
DEADLINE = 30.0  # seconds for the child, CuPy's import and every GPU included

PROBE = f"""
import json, sys, time
try:
    import cupy
    count = cupy.cuda.runtime.getDeviceCount()
except Exception:
    sys.exit({NO_CUPY})
if count < 1:
    sys.exit({NO_CUPY})
rates = []
for i in range(count):
    with cupy.cuda.Device(i) as dev:
        a = cupy.ones(({SIZE}, {SIZE}), dtype=cupy.float32)
        b = cupy.matmul(a, a)
        dev.synchronize()
        done, start = 0, time.perf_counter()
        while True:
            b = cupy.matmul(a, a)
            done += 1
            dev.synchronize()
            took = time.perf_counter() - start
            if took >= {SECONDS}:
                break
        rates.append(2.0 * {SIZE} ** 3 * done / took)
print(json.dumps(rates))
"""


def gpu_rates(
    environ: Mapping[str, str], python: str = sys.executable, timeout: float = DEADLINE
) -> tuple[float, ...] | None:
    """Each GPU's matrix-multiply rate (FLOP/s, GPU order), or None: no CuPy, no GPU, or
    the child failed or ran past `timeout`."""
    try:
        done = subprocess.run(
            [python, "-c", PROBE],
            env=dict(environ),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    try:
        rates = json.loads(done.stdout.strip().splitlines()[-1])
        return tuple(float(r) for r in rates) or None
    except (ValueError, IndexError, TypeError):
        return None


def flops(rate: float) -> str:
    """A rate as people read it: 45.1 TFLOP/s, 850 GFLOP/s."""
    if rate >= 1e12:
        return f"{rate / 1e12:.1f} TFLOP/s"
    return f"{rate / 1e9:.0f} GFLOP/s"
