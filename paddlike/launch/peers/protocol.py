"""The launchers' protocol: every key and every payload they exchange, in one place.

The launchers of a many-node job talk only through a key-value store (node 0's
`StoreServer` or etcd). These are all the keys, per round ``r`` and node ``i``:

| key                         | written by                   | value                          |
| --------------------------- | ---------------------------- | ------------------------------ |
| ``rdzv/<r>/node/<i>``       | node i, create-only          | its `NodeEntry` (JSON)         |
| ``rdzv/<r>/arrived``        | every launcher, add          | arrival count (tickets)        |
| ``rdzv/<r>/count``          | every launcher, add          | entries published              |
| ``rdzv/<r>/by-ticket/<t>``  | arrival t (ranks assigned at | its `NodeEntry` (index: the    |
|                             | the rendezvous, round 0)     | rank it asks for, or -1)       |
| ``rdzv/<r>/order``          | the N-th arrival, once       | tickets in node order (JSON)   |
| ``rdzv/<r>/world``          | the last (N-th) arrival,     | every entry in node order, in  |
|                             | once, before ``complete``    | one value (`encode_world`)     |
| ``rdzv/<r>/complete``       | the last arrival or a        | ``ok``, ``failed:``/           |
|                             | failing node, create-only    | ``mismatch:`` + message,       |
|                             |                              | ``aborted:`` + a cause,        |
|                             | (round 0: also a node that   | ``failed_start:`` + message    |
|                             | cannot start, `startfail`)   |                                |
| ``rdzv/<r>/left/<ticket>``  | every launcher               | it read the verdict            |
| ``job/<r>/abort``           | first failure, create-only   | the job's root cause           |
| ``job/<r>/end/<i>``         | node i (or its monitor)      | ``ok``/``failed``/``lost``     |
| ``job/<r>/done/<i>``        | node i (or its monitor)      | it read the outcome            |
| ``job/<r>/trainers-ok/<i>`` | node i (PS)                  | its trainers all exited 0      |
| ``job/<r>/stop-step/<i>``   | node i, on a preemption      | the smallest step its ranks    |
|                             | notice (`peers.stopstep`)    | have not passed (decimal)      |
| ``job/<r>/stop-outcome/<i>``| node i, after a notice, just | its ranks that did not stop at |
|                             | before its end mark          | the step (JSON, `run.preempt`) |
| ``hb/<i>``                  | node i, add                  | heartbeat counter (TCP store)  |
| ``stacks/<r>/...``          | see `peers.stackreq`         | job-wide stack requests        |
| ``alive/<i>``               | node i, under its lease      | its pid (etcd)                 |

Elastic jobs (`peers.elastic_rendezvous`) add:

| key                         | written by                   | value                          |
| --------------------------- | ---------------------------- | ------------------------------ |
| ``elastic/round``           | every member entering round r| the newest round (a late node  |
|                             | (add, up to r)               | starts there)                  |
| ``rdzv/<r>/closed``         | the node that closes the     | the tickets of the round's     |
|                             | round, create-only           | members (JSON); later tickets  |
|                             |                              | wait for round r+1             |
| ``rdzv/<r>/gone/<ticket>``  | a waiting node whose         | it left before the round       |
|                             | deadline passed              | closed                         |
| ``job/<r>/over``            | every member going on to the | round r ended on every node    |
|                             | next round (not when the job | and its members come: round    |
|                             | ends)                        | r+1 may close now              |
| ``alive/<r>/<i>``           | node i of round r, under its | its pid (etcd)                 |
|                             | lease                        |                                |
| ``elastic/end``             | every member, at the job's   | how it ended: nodes still      |
|                             | end                          | waiting to join stop           |
"""

from __future__ import annotations

import base64
import functools
import json
import zlib
from collections.abc import Sequence

from paddlike.launch.peers.rendezvous_errors import (
    FingerprintMismatch,
    NodeFailedToStart,
    RendezvousAborted,
    RendezvousTimeout,
)
from paddlike.launch.plan.world import NodeEntry
from paddlike.summary import RootCause

# --- keys ------------------------------------------------------------------------------


def rdzv_key(round_: int, *parts: object) -> str:
    """``rdzv/<round>/<parts...>``: the rendezvous of one round."""
    return "/".join(["rdzv", str(round_), *map(str, parts)])


def node_key(round_: int, node: int) -> str:
    return rdzv_key(round_, "node", node)


def arrived_key(round_: int) -> str:
    return rdzv_key(round_, "arrived")


def count_key(round_: int) -> str:
    return rdzv_key(round_, "count")


def ticket_key(round_: int, ticket: int) -> str:
    """An entry published under its arrival ticket: its rank is not known yet."""
    return rdzv_key(round_, "by-ticket", ticket)


def order_key(round_: int) -> str:
    return rdzv_key(round_, "order")


def world_key(round_: int) -> str:
    """Every node's entry in one value: each node reads one key, not N (O(N) store calls
    for the round instead of O(N²))."""
    return rdzv_key(round_, "world")


def complete_key(round_: int) -> str:
    return rdzv_key(round_, "complete")


def left_key(round_: int, ticket: int) -> str:
    return rdzv_key(round_, "left", ticket)


def abort_key(round_: int) -> str:
    return f"job/{round_}/abort"


def end_key(round_: int, node: int) -> str:
    return f"job/{round_}/end/{node}"


def done_key(round_: int, node: int) -> str:
    return f"job/{round_}/done/{node}"


def trainers_ok_key(round_: int, node: int) -> str:
    return f"job/{round_}/trainers-ok/{node}"


def stop_step_key(round_: int, node: int) -> str:
    """A node's position at a preemption notice; the job's stop step is the largest."""
    return f"job/{round_}/stop-step/{node}"


def stop_outcome_key(round_: int, node: int) -> str:
    """A node's part of a preemption's outcome: which of its ranks did not stop at the step."""
    return f"job/{round_}/stop-outcome/{node}"


def stragglers_found_key(round_: int) -> str:
    """Node 0's latest straggler finding, for the other nodes' summaries (issue 37)."""
    return f"stragglers/{round_}/found"


def stacks_seq_key(round_: int) -> str:
    return f"stacks/{round_}/seq"


def stacks_hang_key(round_: int, k: int) -> str:
    return f"stacks/{round_}/hang/{k}"


def stacks_request_key(round_: int, n: int) -> str:
    return f"stacks/{round_}/{n}/request"


def stacks_node_key(round_: int, n: int, node: int) -> str:
    return f"stacks/{round_}/{n}/node/{node}"


def stragglers_node_key(round_: int, node: int) -> str:
    """A node's ranks' recent collectives for node 0's straggler check (issue 37)."""
    return f"stragglers/{round_}/node/{node}"


def stragglers_exclude_key(round_: int, node: int) -> str:
    """--on_straggler exclude: node 0 tells node `node` to leave the elastic job."""
    return f"stragglers/{round_}/exclude/{node}"


def heartbeat_key(node: int) -> str:
    return f"hb/{node}"


def alive_key(node: int) -> str:
    return f"alive/{node}"


def round_alive_key(round_: int, node: int) -> str:
    """Elastic jobs on etcd: node ranks change between rounds, so liveness keys do too."""
    return f"alive/{round_}/{node}"


ELASTIC_ROUND_KEY = "elastic/round"
ELASTIC_END_KEY = "elastic/end"  # the elastic job ended: how (nodes waiting to join stop)


def closed_key(round_: int) -> str:
    return rdzv_key(round_, "closed")


def gone_key(round_: int, ticket: int) -> str:
    return rdzv_key(round_, "gone", ticket)


def over_key(round_: int) -> str:
    return f"job/{round_}/over"


# --- the rendezvous verdict (the value of ``complete``) ------------------------------------

COMPLETE_OK = b"ok"
FAILED_PREFIX = b"failed:"  # then the message of the node whose deadline passed first
MISMATCH_PREFIX = b"mismatch:"  # then the message; every node exits 2
ABORTED_PREFIX = b"aborted:"  # then an encoded RootCause: a launcher stopped (a signal)
# then "exit N:" and a message naming a launcher that could not start (its own error
# line): every node exits N, the failing node's own code (`failed_start_verdict`)
FAILED_START_PREFIX = b"failed_start:"

END_OK = b"ok"
END_FAILED = b"failed"
END_LOST = b"lost"
END_LEFT = b"left"  # elastic: its launcher stopped on a signal and left the job
STOPPED = b"stopped"  # end/done of a launcher that stopped on a signal


def stop_writes(
    round_: int, cause: bytes, *, in_rendezvous: bool, ticket: int | None, node: int
) -> list[tuple[str, bytes]]:
    """What a launcher that a signal stopped in round r writes, each create-only (the
    first one is the round's verdict or cause, so a stop elsewhere that came first wins):

    | where it stopped           | writes                                                  |
    | -------------------------- | ------------------------------------------------------- |
    | in round r's rendezvous    | ``rdzv/<r>/complete`` = aborted: + cause; with a ticket |
    |                            | t, ``rdzv/<r>/left/<t>`` (node 0 need not wait for it)  |
    | past round r's rendezvous  | ``job/<r>/abort`` = cause; its end and done: stopped    |
    """
    if in_rendezvous:
        writes = [(complete_key(round_), ABORTED_PREFIX + cause)]
        if ticket is not None:
            writes.append((left_key(round_, ticket), STOPPED))
        return writes
    return [(abort_key(round_), cause), (end_key(round_, node), STOPPED),
            (done_key(round_, node), STOPPED)]  # fmt: skip


def check_verdict(status: bytes) -> None:
    """The round's verdict: return on "ok", else raise the error every node reports."""
    if status.startswith(ABORTED_PREFIX):
        raise RendezvousAborted(status[len(ABORTED_PREFIX) :])
    if status.startswith(MISMATCH_PREFIX):
        raise FingerprintMismatch(status[len(MISMATCH_PREFIX) :].decode())
    if status.startswith(FAILED_START_PREFIX):
        raise NodeFailedToStart(*_read_failed_start(status[len(FAILED_START_PREFIX) :]))
    if status.startswith(FAILED_PREFIX):
        raise RendezvousTimeout(status[len(FAILED_PREFIX) :].decode())


def failed_start_verdict(message: str, exit_code: int) -> bytes:
    """round 0's verdict when a launcher cannot start: its line and its exit code, which
    every other node exits with too (one cause, one code on every node).

    ("x: missing", 2) -> b"failed_start:exit 2:x: missing"
    """
    return FAILED_START_PREFIX + f"exit {exit_code}:{message}".encode()


def _read_failed_start(rest: bytes) -> tuple[str, int]:
    """`failed_start_verdict`'s message and code; a verdict without "exit N:" is exit 2."""
    head, sep, message = rest.partition(b":")
    if sep and head.startswith(b"exit ") and head[5:].isdigit():
        return message.decode(), int(head[5:])
    return rest.decode(), 2


# --- payloads --------------------------------------------------------------------------


def encode_cause(cause: RootCause) -> bytes:
    return json.dumps(cause.to_dict(), sort_keys=True).encode()


def decode_cause(raw: bytes) -> RootCause:
    """Fields this version does not know (a newer launcher's) are dropped."""
    d = json.loads(raw)
    known = set(RootCause.FIELDS)
    return RootCause(**{k: v for k, v in d.items() if k in known})


def encode_order(tickets: list[int]) -> bytes:
    return json.dumps(tickets).encode()


def decode_order(raw: bytes) -> list[int]:
    return [int(t) for t in json.loads(raw)]


def encode_entry(entry: NodeEntry) -> bytes:
    d = {
        "index": entry.index,
        "host": entry.host,
        "hostname": entry.hostname,
        "pid": entry.pid,
        "ports": list(entry.ports),
        "fingerprint": dict(entry.fingerprint),
        "job_id": entry.job_id,
        "devices": entry.devices,
    }
    # not sorted: the fingerprint's field order is the order mismatches are reported in
    return json.dumps(d).encode()


def decode_entry(raw: bytes) -> NodeEntry:
    d = json.loads(raw)
    return NodeEntry(
        index=int(d["index"]),
        host=str(d["host"]),
        hostname=str(d["hostname"]),
        pid=int(d["pid"]),
        ports=tuple(int(p) for p in d["ports"]),
        fingerprint={str(k): str(v) for k, v in d["fingerprint"].items()},
        job_id=str(d.get("job_id", "")),
        devices=str(d.get("devices", "")),
    )


def encode_world(entries: Sequence[NodeEntry]) -> bytes:
    """Every entry in node order, each fingerprint stored once however many nodes share it
    (they usually all do): about 70 bytes a node rather than a whole entry's 300, and
    deflated (3 to 5 times smaller again: nodes' entries differ little). Every node reads
    it, so at 4096 nodes it is most of the round's bytes."""
    fingerprints: dict[tuple[tuple[str, str], ...], int] = {}
    nodes = []
    for e in entries:
        # the fingerprint's field order is kept: it is the order mismatches are reported in
        fp = fingerprints.setdefault(tuple(e.fingerprint.items()), len(fingerprints))
        nodes.append([e.index, e.host, e.hostname, e.pid, list(e.ports), fp, e.job_id, e.devices])
    world = {"fingerprints": [dict(f) for f in fingerprints], "nodes": nodes}
    return zlib.compress(json.dumps(world).encode())


@functools.lru_cache(maxsize=8)
def decode_world(raw: bytes) -> tuple[NodeEntry, ...]:
    """The entries of `encode_world`. Cached: launchers simulated in one process (tests,
    bench/rendezvous.py) decode one world once; the entries are shared, read-only."""
    d = json.loads(zlib.decompress(raw))
    fps = [{str(k): str(v) for k, v in f.items()} for f in d["fingerprints"]]
    return tuple(
        NodeEntry(
            index=int(n[0]),
            host=str(n[1]),
            hostname=str(n[2]),
            pid=int(n[3]),
            ports=tuple(int(p) for p in n[4]),
            fingerprint=fps[int(n[5])],
            job_id=str(n[6]),
            devices=str(n[7]) if len(n) > 7 else "",
        )
        for n in d["nodes"]
    )


# --- a death notice (one line of JSON; `peers.notice` delivers it) -----------------------


def encode_notice(
    store: tuple[str, int] | None,
    token: bytes | None,
    cause: tuple[str, bytes],
    marks: Sequence[tuple[str, bytes]],
    *,
    etcd: Sequence[tuple[str, int]] = (),
    job_id: str | None = None,
) -> bytes:
    """A death notice (`peers.notice`, which delivers it): `cause` and `marks` written to
    node 0's `store` (with its `token`), or to the `etcd` endpoints of `job_id`."""

    def pair(kv: tuple[str, bytes]) -> list[str]:
        return [kv[0], base64.b64encode(kv[1]).decode()]

    where: dict = {"etcd": [list(e) for e in etcd], "job_id": job_id} if etcd else {}
    if store is not None:
        where = {"store": list(store), "token": token.hex() if token is not None else None}
    return json.dumps({**where, "cause": pair(cause), "marks": [pair(m) for m in marks]}).encode()
