"""Why the launchers could not start a round together; `exit_code` is what every launcher
exits with (2: the configuration is wrong somewhere, 1: a node or the store is missing)."""

from __future__ import annotations


class RendezvousError(RuntimeError):
    exit_code = 1
    # nothing started here, and the others were not told: the pipeline refuses the start
    # (exit 2) and tells them (`run.job`, `peers.startfail`)
    start_refusal = False


class FingerprintMismatch(RendezvousError):
    """The nodes disagree (options, node index, token): every node exits 2."""

    exit_code = 2


class NodeFailedToStart(RendezvousError):
    """Another node's launcher could not start (its error, published by `peers.startfail`):
    every node exits with that node's code (2 for bad input, 1 for a name that never
    resolved, ...)."""

    exit_code = 2

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class RendezvousFull(RendezvousError):
    """More launchers than --nnodes came to a rendezvous that assigns ranks (a job already
    complete, or one started twice): this launcher exits 2; the job is left alone."""

    exit_code = 2


class RendezvousTimeout(RendezvousError):
    exit_code = 1


class StoreRefused(RendezvousError):
    """Node 0's store refused this launcher (wrong or missing job token): configuration."""

    exit_code = 2


class StoreHostError(RendezvousError):
    """This node cannot host the launchers' store (the address or port is unusable)."""


class StoreBindError(StoreHostError):
    """Node 0 cannot bind the launchers' store's address (its port taken): a start-up
    refusal, nothing started (exit 2); the pipeline names the option that chose the port
    (`context.master.cannot_host_line`) and tells the others (`peers.startfail`)."""

    exit_code = 2
    start_refusal = True

    def __init__(self, message: str, address: str, reason: str) -> None:
        super().__init__(message)
        self.address = address  # "ip:port" ("[fd00::1]:port")
        self.reason = reason  # the bind's error: "Address already in use"


class RendezvousAborted(RendezvousError):
    """A launcher stopped during the rendezvous (a signal); `cause` is its encoded RootCause
    (`protocol.decode_cause`), which every node then reports."""

    def __init__(self, cause: bytes) -> None:
        super().__init__("rendezvous: another launcher stopped")
        self.cause = cause
