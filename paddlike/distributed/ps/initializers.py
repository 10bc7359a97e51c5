"""Initial values of table rows: a pure function of (seed, key, column).

A sparse row is created on whichever server owns its key, whenever it is first
pulled; making the value a counter-based hash of (seed, key, column) instead of a
draw from a stateful generator is what makes it the same in every run, on every
server count and in every order of first pulls. Dense tables use the element index
as the key, so their initial values do not depend on how they are split either.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from paddlike.distributed.ps.sharding import mix64

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _uniform01(seed: int, keys: np.ndarray, dim: int, stream: int = 0) -> np.ndarray:
    """Uniform [0, 1) float64 of shape (len(keys), dim), a function of its arguments only."""
    k = np.asarray(keys, dtype=np.int64).view(np.uint64)
    base = mix64(np.uint64((seed * 2 + stream) & 0xFFFFFFFFFFFFFFFF) ^ mix64(k))
    with np.errstate(over="ignore"):
        cols = np.arange(1, dim + 1, dtype=np.uint64) * _GOLDEN
        bits = mix64(base[:, None] + cols[None, :])
    return (bits >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


class Initializer:
    """Base: `rows(keys, dim)` gives float32 rows for the given int64 keys."""

    def rows(self, keys: np.ndarray, dim: int) -> np.ndarray:
        raise NotImplementedError

    def config(self) -> dict[str, Any]:
        raise NotImplementedError


@dataclass(frozen=True)
class Constant(Initializer):
    value: float = 0.0

    def rows(self, keys: np.ndarray, dim: int) -> np.ndarray:
        return np.full((len(keys), dim), self.value, dtype=np.float32)

    def config(self) -> dict[str, Any]:
        return {"name": "constant", "value": float(self.value)}


@dataclass(frozen=True)
class Uniform(Initializer):
    low: float = -0.01
    high: float = 0.01
    seed: int = 0

    def rows(self, keys: np.ndarray, dim: int) -> np.ndarray:
        u = _uniform01(self.seed, keys, dim)
        return (self.low + (self.high - self.low) * u).astype(np.float32)

    def config(self) -> dict[str, Any]:
        return {
            "name": "uniform",
            "low": float(self.low),
            "high": float(self.high),
            "seed": int(self.seed),
        }


@dataclass(frozen=True)
class Normal(Initializer):
    mean: float = 0.0
    std: float = 0.01
    seed: int = 0

    def rows(self, keys: np.ndarray, dim: int) -> np.ndarray:
        u1 = _uniform01(self.seed, keys, dim, stream=0)
        u2 = _uniform01(self.seed, keys, dim, stream=1)
        z = np.sqrt(-2.0 * np.log1p(-u1)) * np.cos(2.0 * np.pi * u2)  # Box-Muller
        return (self.mean + self.std * z).astype(np.float32)

    def config(self) -> dict[str, Any]:
        return {
            "name": "normal",
            "mean": float(self.mean),
            "std": float(self.std),
            "seed": int(self.seed),
        }


def from_config(cfg: dict[str, Any]) -> Initializer:
    """The initializer a declaration names (the server builds it from the JSON it received)."""
    params = {k: v for k, v in cfg.items() if k != "name"}
    kinds: dict[str, type[Initializer]] = {
        "constant": Constant,
        "uniform": Uniform,
        "normal": Normal,
    }
    kind = kinds.get(cfg.get("name", ""))
    if kind is None:
        raise ValueError(
            f"unknown initializer {cfg.get('name')!r}; expected one of {sorted(kinds)}"
        )
    return kind(**params)
