"""Parameter-server training: servers hold the tables and run the optimizer.

    from paddlike.distributed import ps
    ps.init()                                  # role from the environment
    if ps.is_server():
        ps.run_server()                        # blocks until the job stops it
    else:
        ps.init_worker(mode="sync")            # "sync" | "async" | "geo" (k_steps=)
        w = ps.dense_table("w", shape=(16,), optimizer=ps.SGD(lr=0.1))
        emb = ps.sparse_table("emb", dim=8, optimizer=ps.Adagrad(lr=0.05),
                              initializer=ps.Uniform(-0.01, 0.01))
        ... w.pull() / w.push(grad) / emb.pull(keys) / emb.push(keys, grads) ...
        ps.barrier_worker(); ps.save("ckpt/"); ps.stop_worker()

Start the script with `python -m paddlike.launch --server_num 2 --worker_num 2 script.py`;
the launcher sets the role and addresses (see paddlike/contract.py).

Modes: sync — a push of step s is applied, as the mean of every trainer's push of
step s, once all have arrived, and a pull waits for the steps this worker pushed (for up
to init_worker's `timeout`, while the servers' liveness is checked every second);
async — pushes apply on arrival; geo — a local copy, merged every `k_steps` pushes.
`save` and `load` are collective: every trainer calls them, trainer 0 does the work,
all return together.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from paddlike.distributed.ps import auth, checkpoint
from paddlike.distributed.ps.checkpoint import CheckpointError
from paddlike.distributed.ps.client import Client, PsAuthError, PsError, PsTimeoutError
from paddlike.distributed.ps.handles import (
    DenseTable,
    GeoDenseTable,
    GeoSparseTable,
    SparseTable,
)
from paddlike.distributed.ps.heter import (
    ForwardBatch,
    StageError,
    StageTimeoutError,
    close_stage,
    end_forward,
    init_stage,
    is_heter_worker,
    recv_backward,
    recv_forward,
    send_backward,
    send_forward,
    stage_id,
    stage_num,
)
from paddlike.distributed.ps.initializers import Constant, Initializer, Normal, Uniform
from paddlike.distributed.ps.optimizers import SGD, Adagrad, Adam, Optimizer
from paddlike.distributed.ps.role import PsRole, Role, RoleError, role_from_env
from paddlike.distributed.ps.tables import MODES, TableError, TableSpec
from paddlike.distributed.ps.wire import Message, Op

__all__ = [
    "SGD",
    "Adagrad",
    "Adam",
    "CheckpointError",
    "Constant",
    "DenseTable",
    "ForwardBatch",
    "Normal",
    "PsAuthError",
    "PsError",
    "PsTimeoutError",
    "RoleError",
    "SparseTable",
    "StageError",
    "StageTimeoutError",
    "TableError",
    "Uniform",
    "barrier_worker",
    "close_stage",
    "dense_table",
    "end_forward",
    "init",
    "init_stage",
    "init_worker",
    "is_heter_worker",
    "is_server",
    "is_worker",
    "load",
    "recv_backward",
    "recv_forward",
    "run_server",
    "save",
    "send_backward",
    "send_forward",
    "server_num",
    "sparse_table",
    "stage_id",
    "stage_num",
    "stop_worker",
    "trainer_id",
    "trainers_num",
]


class _State:
    role: PsRole | None = None
    client: Client | None = None
    mode = "sync"
    k_steps = 1
    tables: dict[str, DenseTable | SparseTable] = {}  # noqa: RUF012


_state = _State()


def init(environ: Mapping[str, str] | None = None) -> PsRole:
    """Read this process's role and the job's addresses from the environment."""
    _state.role = role_from_env(os.environ if environ is None else environ)
    return _state.role


def _role() -> PsRole:
    if _state.role is None:
        init()
    assert _state.role is not None
    return _state.role


def is_server() -> bool:
    return _role().role is Role.SERVER


def is_worker() -> bool:
    return _role().role is Role.TRAINER


def trainer_id() -> int:
    return _role().trainer_id


def trainers_num() -> int:
    return _role().trainers_num


def server_num() -> int:
    return len(_role().server_endpoints)


def run_server() -> None:
    """Serve this process's shards until every trainer called stop_worker() or SIGTERM."""
    from paddlike.distributed.ps import server

    role = _role()
    if role.role is not Role.SERVER:
        raise RoleError("run_server() called in a trainer; check ps.is_server() first")
    server.serve(role)


def init_worker(
    mode: str = "sync",
    k_steps: int = 10,
    timeout: float | None = None,
    request_timeout: float | None = None,
) -> None:
    """Connect to every server.

    `timeout` (s; default PADDLIKE_TIMEOUT, else 300 like init_parallel_env) bounds how long
    a request may wait for the other trainers: a sync-mode pull for every trainer's push of
    the step, barrier_worker for every trainer. Meanwhile each server's liveness is checked
    on its own: a server that answers neither the request nor a PING within
    `request_timeout` (default min(timeout, 60)) is reported dead, with its endpoint.
    """
    role = _role()
    if role.role is Role.SERVER:  # a heter trainer connects too, for its dense tables
        raise RoleError("init_worker() called in a server; check ps.is_worker() first")
    if mode not in MODES:
        raise ValueError(f"mode={mode!r}: expected one of {', '.join(MODES)}")
    if mode == "geo" and k_steps < 1:
        raise ValueError(f"k_steps={k_steps}: geo mode needs k_steps >= 1")
    if _state.client is not None:
        _state.client.close()
    for name, value in (("timeout", timeout), ("request_timeout", request_timeout)):
        if value is not None and not value > 0:
            raise ValueError(f"init_worker: {name}={value!r} must be positive seconds")
    # the token of the environment the role came from (`init(environ)` may not be os.environ)
    policy = auth.Policy.create(role.token, None)
    client = Client(role.server_endpoints, role.trainer_id, timeout or role.timeout,
                    request_timeout, policy=policy)  # fmt: skip
    n = len(role.server_endpoints)
    try:  # the servers may still be starting: wait for them, without liveness checks
        hello = [(i, Message(Op.HELLO, arg0=n, arg1=role.trainers_num)) for i in range(n)]
        client.call(hello, probe=False)
    except BaseException:
        client.close()
        raise
    _state.client, _state.mode, _state.k_steps, _state.tables = client, mode, k_steps, {}


def _client() -> Client:
    if _state.client is None:
        raise PsError("call ps.init_worker() before using tables")
    return _state.client


def _declare(spec: TableSpec) -> None:
    client = _client()
    client.call([(i, Message(Op.DECLARE, text=spec.to_json())) for i in range(len(client.socks))])


def dense_table(
    name: str,
    shape: tuple[int, ...] | int,
    optimizer: Optimizer | None = None,
    initializer: Initializer | None = None,
) -> DenseTable:
    """Declare (or join) a dense table; every worker must declare it the same way."""
    shape = (shape,) if isinstance(shape, int) else tuple(int(d) for d in shape)
    spec = TableSpec(
        name,
        "dense",
        shape,
        (optimizer or SGD()).config(),
        (initializer or Constant(0.0)).config(),
        _state.mode,
    )
    _declare(spec)
    table = (
        GeoDenseTable(_client(), spec, _state.k_steps)
        if _state.mode == "geo"
        else DenseTable(_client(), spec)
    )
    _state.tables[name] = table
    return table


def sparse_table(
    name: str, dim: int, optimizer: Optimizer | None = None, initializer: Initializer | None = None
) -> SparseTable:
    """Declare (or join) a sparse table of rows of `dim` floats keyed by int64 ids."""
    spec = TableSpec(
        name,
        "sparse",
        (int(dim),),
        (optimizer or SGD()).config(),
        (initializer or Uniform()).config(),
        _state.mode,
    )
    _declare(spec)
    table = (
        GeoSparseTable(_client(), spec, _state.k_steps)
        if _state.mode == "geo"
        else SparseTable(_client(), spec)
    )
    _state.tables[name] = table
    return table


def barrier_worker(timeout: float | None = None) -> None:
    """Wait until every trainer reaches this call (geo mode sends pending changes first)."""
    if _role().role is Role.HETER_TRAINER:  # the servers count trainers by their id
        raise RoleError("barrier_worker() is for CPU trainers; a heter trainer has no trainer id")
    for t in _state.tables.values():
        t.flush()
    _client().call([(0, Message(Op.BARRIER))], timeout)


def save(dirname: str | os.PathLike[str]) -> None:
    """Write every shard of every table with its optimizer state to `dirname` (collective)."""
    client = _client()
    barrier_worker()
    if _role().trainer_id == 0:
        final = Path(dirname).resolve()
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = checkpoint.temp_dir_for(final)
        tmp.mkdir(exist_ok=True)
        request = json.dumps({"dir": str(tmp)})
        try:
            reps = client.call([(i, Message(Op.SAVE, text=request)) for i in range(server_num())])
            checkpoint.write_manifest(tmp, server_num(), json.loads(reps[0].text))
            checkpoint.commit(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)  # the previous checkpoint stays as it was
            raise
    barrier_worker()


def load(dirname: str | os.PathLike[str]) -> None:
    """Replace every declared table's values and optimizer state from `dirname` (collective)."""
    client = _client()
    barrier_worker()
    if _role().trainer_id == 0:
        root = Path(dirname).resolve()
        manifest = checkpoint.read_manifest(root)
        if manifest["num_servers"] != len(client.socks):
            raise CheckpointError(
                f"checkpoint {root} was saved by {manifest['num_servers']} servers, this job "
                f"has {len(client.socks)}; load it into a job with the same --server_num"
            )
        saved = {d["name"]: d for d in manifest["tables"]}
        for name, table in _state.tables.items():
            if name not in saved:
                raise CheckpointError(f"checkpoint {root} has no table {name!r}")
            was = TableSpec.from_json(json.dumps(saved[name]))
            field = was.differing_field(table.spec)
            if field is not None:
                raise CheckpointError(
                    f"checkpoint {root}: table {name!r} has {field}={getattr(was, field)} in "
                    f"the checkpoint, this job declares {field}={getattr(table.spec, field)}"
                )
        client.call(
            [
                (i, Message(Op.LOAD, text=json.dumps({"dir": str(root)})))
                for i in range(len(client.socks))
            ]
        )
    barrier_worker()


def stop_worker() -> None:
    """Tell every server this trainer is done (geo: after sending pending changes)."""
    client = _client()
    for t in _state.tables.values():
        t.flush()
    if _role().role is Role.TRAINER:  # a heter trainer only disconnects: servers count trainers
        client.call([(i, Message(Op.STOP)) for i in range(len(client.socks))])
    client.close()
    _state.client, _state.tables = None, {}
