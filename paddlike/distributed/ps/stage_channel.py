"""The channel between two pipeline stages: forward batches one way, their answers back.

`StageSender` (a CPU trainer, or a heter trainer feeding a later stage) connects a DEALER
to one member of the next stage; `StageReceiver` (a heter trainer) binds a ROUTER that
several senders feed (fan-in). Every batch is tagged with its sender's index and a batch
id, and is answered by exactly one backward packet sent to that sender.

What a user notices:
- Bounded in-flight batches: a sender with `max_in_flight` unanswered batches blocks in
  `send_forward` until one is answered, up to the deadline; then a StageError names the
  receiver and the oldest unanswered batch.
- Deadlines everywhere (PADDLIKE_TIMEOUT, else 300 s), and errors naming the peer's
  endpoint and index.
- A peer that dies is noticed at once, not at the deadline: a killed process closes its
  TCP connection, which the socket monitor reports. The receiver learns which sender it
  was from the connection's file descriptor (ZMQ_SRCFD of the sender's packets), so the
  error names the trainer. ZMTP heartbeats close a connection whose peer went silent
  (a cut network) within `heartbeat_timeout`, which then reads the same way.
- A clean end: `end()` waits for every answer, sends END and waits for the receiver's
  acknowledgement; `recv_forward` returns None once every expected sender has ended.

Sockets are created in one place, `stage_sockets.open_socket`, which secures them with
`ps.auth` (the job token and hosts): a peer that is refused is reported as an
`auth.AuthError` at once. The sending end is stage_sender.py, the receiving end
stage_receiver.py; this module is the channel's name for both.
"""

from paddlike.distributed.ps.stage_receiver import ForwardBatch, StageReceiver
from paddlike.distributed.ps.stage_sender import StageSender
from paddlike.distributed.ps.stage_sockets import (
    DEFAULT_MAX_IN_FLIGHT,
    StageError,
    StageTimeoutError,
)

__all__ = [
    "DEFAULT_MAX_IN_FLIGHT",
    "ForwardBatch",
    "StageError",
    "StageReceiver",
    "StageSender",
    "StageTimeoutError",
]
