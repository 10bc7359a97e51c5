"""Heterogeneous parameter-server jobs: CPU trainers feed heter trainers, stage to stage.

    from paddlike.distributed import ps
    if ps.is_heter_worker():                      # TRAINING_ROLE=HETER_TRAINER
        while (batch := ps.recv_forward()) is not None:   # None: every sender ended
            trainer_id, batch_id, x = batch
            ps.send_backward(grad_of(x), batch_id, trainer_id=trainer_id)
    else:                                         # a CPU trainer (stage 1)
        ps.send_forward(activations, batch_id=step)
        grad = ps.recv_backward(step)
        ...
        ps.end_forward()                          # no more batches: the heter may finish

The channel is built from the environment (see ps/stage.py) on first use, or explicitly
with `init_stage(max_in_flight=, timeout=, heartbeat_timeout=)`. A heter trainer binds
its endpoint at `init_stage` (or its first call). Semantics are in ps/stage_channel.py:
bounded in-flight batches, deadlines, a dead peer named at once, a clean end; both ends
are secured with ps.auth (PADDLIKE_JOB_TOKEN, PADDLIKE_NODE_HOSTS) like the servers.
One thread per process uses the channel (ZeroMQ sockets are not thread-safe).
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Mapping

import numpy as np

from paddlike.distributed.ps import auth, endpoints
from paddlike.distributed.ps import stage as _stage_env
from paddlike.distributed.ps.stage import StageRole, StageRoleError, stage_role_from_env
from paddlike.distributed.ps.stage_channel import (
    DEFAULT_MAX_IN_FLIGHT,
    ForwardBatch,
    StageError,
    StageReceiver,
    StageSender,
    StageTimeoutError,
)

__all__ = [
    "ForwardBatch",
    "StageError",
    "StageRoleError",
    "StageTimeoutError",
    "close_stage",
    "end_forward",
    "init_stage",
    "is_heter_worker",
    "recv_backward",
    "recv_forward",
    "send_backward",
    "send_forward",
    "stage_id",
    "stage_num",
]


class _State:
    environ: Mapping[str, str] | None = None
    role: StageRole | None = None
    sender: StageSender | None = None
    receiver: StageReceiver | None = None
    max_in_flight = DEFAULT_MAX_IN_FLIGHT
    timeout: float | None = None
    heartbeat_timeout: float | None = None


_state = _State()


def _env() -> Mapping[str, str]:
    return os.environ if _state.environ is None else _state.environ


def is_heter_worker() -> bool:
    """True in a heter trainer (TRAINING_ROLE or PADDLE_ROLE = HETER_TRAINER)."""
    return _stage_env.is_heter(_env())


def stage_id() -> int:
    """This process's stage: 1 for CPU trainers (and any plain PS process), 2.. for heter."""
    return _stage_env.stage_id(_env())


def stage_num() -> int:
    """How many stages the job has (STAGE_NUM; 1 in a plain PS job)."""
    return _stage_env.stage_num(_env())


def init_stage(
    environ: Mapping[str, str] | None = None,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    timeout: float | None = None,
    heartbeat_timeout: float | None = None,
) -> StageRole:
    """Read this process's stage from the environment and open its ends of the channel.

    `max_in_flight`: forward batches a sender may have unanswered before send_forward
    blocks. `timeout` (s): default deadline of every wait (PADDLIKE_TIMEOUT, else 300).
    `heartbeat_timeout` (s): a connection whose peer is silent this long (a cut network)
    is closed and reported (default min(timeout, 30)). A killed peer is reported at once.
    """
    close_stage()
    for name, value in (("timeout", timeout), ("heartbeat_timeout", heartbeat_timeout)):
        if value is not None and not value > 0:
            raise ValueError(f"init_stage: {name}={value!r} must be positive seconds")
    if max_in_flight < 1:
        raise ValueError(f"init_stage: max_in_flight={max_in_flight} must be at least 1")
    _state.environ = environ
    role = stage_role_from_env(_env())
    _state.role, _state.max_in_flight = role, max_in_flight
    _state.timeout, _state.heartbeat_timeout = timeout, heartbeat_timeout
    if role.is_heter:
        _receiver()
    return role


def _host(endpoint: str) -> str:
    return endpoints.host(endpoint)


def _role() -> StageRole:
    if _state.role is None:
        init_stage(_state.environ)
    assert _state.role is not None
    return _state.role


def _receiver() -> StageReceiver:
    role = _role()
    if _state.receiver is None:
        if not role.is_heter:
            raise StageError(
                f"recv_forward/send_backward are for heter trainers; this process is stage "
                f"{role.stage_id} of {role.stage_num} (a CPU trainer), which has no previous "
                "stage (check ps.is_heter_worker() first)"
            )
        _state.receiver = StageReceiver(
            role.endpoint,
            stage=role.stage_id,
            index=role.index,
            senders=role.senders(),
            timeout=_state.timeout or role.timeout,
            heartbeat_timeout=_state.heartbeat_timeout,
            policy=auth.Policy.from_env(
                _env(), [_host(ep) for ep in (*role.previous, role.endpoint)]
            ),
        )
    return _state.receiver


def _sender() -> StageSender:
    role = _role()
    if _state.sender is None:
        if not role.next:
            raise StageError(
                f"send_forward/recv_backward: stage {role.stage_id} is the last of "
                f"{role.stage_num}; there is no next stage to send batches to (is "
                "PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST set?)"
            )
        _state.sender = StageSender(
            role.next_peer,
            stage=role.stage_id,
            index=role.index,
            peer_index=role.index % len(role.next),
            max_in_flight=_state.max_in_flight,
            timeout=_state.timeout or role.timeout,
            heartbeat_timeout=_state.heartbeat_timeout,
            policy=auth.Policy.from_env(_env()),
        )
    return _state.sender


def send_forward(activations: object, batch_id: int, timeout: float | None = None) -> None:
    """Send a batch's boundary activations (an array or a tuple of arrays) to the next stage.

    Blocks while `max_in_flight` batches are unanswered, up to the deadline. The arrays
    travel without a copy: leave them unchanged until recv_backward(batch_id) returns."""
    _sender().send_forward(activations, batch_id, timeout)


def recv_backward(batch_id: int, timeout: float | None = None) -> np.ndarray | tuple:
    """The next stage's answer to batch `batch_id` (read-only; an array or a tuple)."""
    return _sender().recv_backward(batch_id, timeout)


def end_forward(timeout: float | None = None) -> None:
    """No more batches from this sender: waits for every answer, then for the next stage's
    acknowledgement. Call it once at the end of training, before ps.stop_worker()."""
    _sender().end(timeout)


def recv_forward(timeout: float | None = None) -> ForwardBatch | None:
    """The next batch from the previous stage as (trainer_id, batch_id, activations), in
    arrival order; None once every sender has called end_forward()."""
    receiver = _receiver()
    batch = receiver.recv_forward(timeout)
    if batch is None:
        receiver.close()  # every sender is gone; later calls keep returning None
    return batch


def send_backward(grads: object, batch_id: int, trainer_id: int | None = None) -> None:
    """Answer batch `batch_id` of `trainer_id` with the gradient of its activations (or any
    array the sender expects). `trainer_id` may be left out when only one sender has that
    batch unanswered. The arrays travel without a copy: don't write into them afterwards."""
    _receiver().send_backward(grads, batch_id, trainer_id)


def close_stage() -> None:
    """Close this process's ends of the channel (at exit too). Does not send end_forward."""
    for end in (_state.sender, _state.receiver):
        if end is not None:
            end.close()
    _state.sender = _state.receiver = None
    _state.role = None


atexit.register(close_stage)
