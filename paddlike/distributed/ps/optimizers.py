"""Optimizers the servers run (and geo-mode workers run on their local copy).

Each optimizer updates a parameter array in place from a gradient and its per-element
state ("slots", e.g. Adagrad's accumulator). The same code serves a dense shard, a
chunk of one, and a gathered batch of sparse rows, because every slot has the
parameter's shape. Adam's step count is the caller's: one scalar per dense shard,
one per sparse row, passed in as `step` (broadcastable against the parameter).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


class Optimizer:
    """Base class; subclasses are frozen dataclasses of hyper-parameters."""

    slots: tuple[str, ...] = ()
    uses_step = False

    def init_slots(self, shape: tuple[int, ...]) -> dict[str, np.ndarray]:
        return {name: np.zeros(shape, dtype=np.float32) for name in self.slots}

    def apply(
        self,
        param: np.ndarray,
        grad: np.ndarray,
        slots: dict[str, np.ndarray],
        step: np.ndarray | int = 1,
    ) -> None:
        raise NotImplementedError

    def config(self) -> dict[str, Any]:
        raise NotImplementedError


@dataclass(frozen=True)
class SGD(Optimizer):
    lr: float = 0.01

    def apply(self, param, grad, slots, step=1):  # type: ignore[no-untyped-def]
        param -= np.float32(self.lr) * grad

    def config(self) -> dict[str, Any]:
        return {"name": "sgd", "lr": float(self.lr)}


@dataclass(frozen=True)
class Adagrad(Optimizer):
    lr: float = 0.01
    epsilon: float = 1e-6
    initial_accumulator_value: float = 0.0
    slots = ("moment",)

    def init_slots(self, shape: tuple[int, ...]) -> dict[str, np.ndarray]:
        return {"moment": np.full(shape, self.initial_accumulator_value, dtype=np.float32)}

    def apply(self, param, grad, slots, step=1):  # type: ignore[no-untyped-def]
        moment = slots["moment"]
        moment += grad * grad
        param -= np.float32(self.lr) * grad / (np.sqrt(moment) + np.float32(self.epsilon))

    def config(self) -> dict[str, Any]:
        return {
            "name": "adagrad",
            "lr": float(self.lr),
            "epsilon": float(self.epsilon),
            "initial_accumulator_value": float(self.initial_accumulator_value),
        }


@dataclass(frozen=True)
class Adam(Optimizer):
    lr: float = 0.001
    beta1: float = 0.9
    beta2: float = 0.999
    epsilon: float = 1e-8
    slots = ("moment1", "moment2")
    uses_step = True

    def apply(self, param, grad, slots, step=1):  # type: ignore[no-untyped-def]
        m, v = slots["moment1"], slots["moment2"]
        b1, b2 = np.float32(self.beta1), np.float32(self.beta2)
        m *= b1
        m += (1 - b1) * grad
        v *= b2
        v += (1 - b2) * grad * grad
        t = np.asarray(step, dtype=np.float64)
        lr_t = (self.lr * np.sqrt(1 - self.beta2**t) / (1 - self.beta1**t)).astype(np.float32)
        param -= lr_t * m / (np.sqrt(v) + np.float32(self.epsilon))

    def config(self) -> dict[str, Any]:
        return {
            "name": "adam",
            "lr": float(self.lr),
            "beta1": float(self.beta1),
            "beta2": float(self.beta2),
            "epsilon": float(self.epsilon),
        }


def from_config(cfg: dict[str, Any]) -> Optimizer:
    """The optimizer a declaration names (the server builds it from the JSON it received)."""
    kinds: dict[str, type[Optimizer]] = {"sgd": SGD, "adagrad": Adagrad, "adam": Adam}
    kind = kinds.get(cfg.get("name", ""))
    if kind is None:
        raise ValueError(f"unknown optimizer {cfg.get('name')!r}; expected one of {sorted(kinds)}")
    return kind(**{k: v for k, v in cfg.items() if k != "name"})
