"""The pre-flight check's thresholds, and what the names of `--preflight_limits` mean (its
text is checked by `context.options.values.preflight_limits`).

    --preflight_limits "bandwidth=0.5,rtt=4,rtt_floor_ms=1,disk_gb=1,memory_gb=0.5"

| name         | default | a node or link fails when                                   |
| ------------ | ------- | ----------------------------------------------------------- |
| bandwidth    | 0.5     | a link's bandwidth is under this fraction of the median     |
| rtt          | 4       | a link's round trip is over this many times the median ...  |
| rtt_floor_ms | 1       | ... and over this many milliseconds (noise on fast networks)|
| disk_gb      | 1       | the log directory's file system has less free (GB, 10^9)    |
| memory_gb    | 0.5     | the node has less memory available (MemAvailable, GB)       |
| quarantine_rounds | 2  | (elastic) the node's processes or launcher ended this many  |
|              |         | rounds: left out where the job can do without it (0: never) |
| matmul       | 0.5     | (full, CuPy) a GPU's matrix-multiply rate is under this     |
|              |         | fraction of the job's median GPU rate                       |
"""

from __future__ import annotations

from paddlike.launch import NamedTuple

DEFAULT_LIMITS_TEXT = (
    "bandwidth=0.5,rtt=4,rtt_floor_ms=1,disk_gb=1,memory_gb=0.5,quarantine_rounds=2"
)


class Limits(NamedTuple):
    """Thresholds of the verdict; numbers in SI units (fractions, seconds, bytes)."""

    bandwidth: float = 0.5  # fraction of the job's median link bandwidth
    rtt: float = 4.0  # multiple of the job's median round trip
    rtt_floor: float = 0.001  # seconds: a round trip under this is never slow
    disk: float = 1e9  # bytes free where the logs go
    memory: float = 0.5e9  # bytes of memory available
    quarantine_rounds: float = 2  # elastic: rounds a node may end before it is left out
    matmul: float = 0.5  # full, CuPy: fraction of the job's median GPU matmul rate

    @classmethod
    def of(cls, pairs: tuple[tuple[str, float], ...] | None) -> Limits:
        """From the option's parsed pairs (`parse_limits`); defaults for the rest."""
        limits = cls()
        for name, value in pairs or ():
            field, scale = _NAMES[name]
            limits = limits._replace(**{field: value * scale})
        return limits


# the option's names (`context.options.values.PREFLIGHT_LIMITS` checks them) -> (Limits
# field, scale to SI units)
_NAMES = {
    "bandwidth": ("bandwidth", 1.0),
    "rtt": ("rtt", 1.0),
    "rtt_floor_ms": ("rtt_floor", 1e-3),
    "disk_gb": ("disk", 1e9),
    "memory_gb": ("memory", 1e9),
    "quarantine_rounds": ("quarantine_rounds", 1.0),
    "matmul": ("matmul", 1.0),
}


def agreed_settings(preflight: str | None, pairs: tuple[tuple[str, float], ...]) -> dict[str, str]:
    """The check's settings as fingerprint fields (`plan.agreement.check_fingerprints`):
    nodes that would check with other modes or thresholds reach other verdicts, so they
    must disagree at the rendezvous, before anything starts (issue 35).

    None (the default on several nodes) and "on" are the same check; limits equal to the
    defaults are the defaults however they were spelled; with the check off they are moot.

    (None, ())                 -> {"preflight": "on", "preflight_limits": "the defaults"}
    ("on", (("rtt", 4.0),))    -> {"preflight": "on", "preflight_limits": "the defaults"}
    ("full", (("rtt", 8.0),))  -> {"preflight": "full", "preflight_limits": "rtt=8"}
    ("off", (("rtt", 8.0),))   -> {"preflight": "off"}
    """
    mode = preflight or "on"
    if mode == "off":
        return {"preflight": mode}
    limits, defaults = Limits.of(pairs), Limits()
    changed = [
        f"{name}={getattr(limits, field) / scale:g}"
        for name, (field, scale) in _NAMES.items()
        if getattr(limits, field) != getattr(defaults, field)
    ]
    return {"preflight": mode, "preflight_limits": ",".join(changed) or "the defaults"}
