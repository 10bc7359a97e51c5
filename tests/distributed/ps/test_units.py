"""The PS building blocks in-process: wire format, sharding, initializers, key index, specs."""

from __future__ import annotations

import numpy as np
import pytest

from paddlike.distributed import ps
from paddlike.distributed.ps import wire
from paddlike.distributed.ps.keyindex import KeyIndex
from paddlike.distributed.ps.role import RoleError, role_from_env
from paddlike.distributed.ps.sharding import dense_ranges, sparse_servers
from paddlike.distributed.ps.tables import SparseShard, TableSpec, merge_rows


def test_a_large_array_travels_in_4_mib_frames_and_comes_back_equal():
    big = np.arange(3 * (1 << 20) + 5, dtype=np.float32)  # 12 MiB + 20 bytes
    msg = wire.Message(wire.Op.PUSH_DENSE, step=7, text="w", arrays=[big, np.eye(3)])
    frames = wire.encode(msg)
    assert [len(f) for f in frames[3:]] == [4 << 20] * 3 + [20, 72]
    back = wire.decode([bytes(f) for f in frames])
    assert (back.op, back.step, back.text) == (wire.Op.PUSH_DENSE, 7, "w")
    np.testing.assert_array_equal(back.array(0), big)
    np.testing.assert_array_equal(back.array(1), np.eye(3))


def test_decoding_rejects_extra_frames_and_unknown_dtypes():
    frames = [bytes(f) for f in wire.encode(wire.Message(wire.Op.HELLO))]
    with pytest.raises(wire.WireError, match="1 unexpected frames after the arrays"):
        wire.decode([*frames, b"x"])
    bad = [frames[0][:7] + b"\x01" + frames[0][8:], frames[1], bytes([99]) + bytes(23), b""]
    with pytest.raises(wire.WireError, match="array 0: unknown dtype code 99"):
        wire.decode(bad)


def test_dense_ranges_cover_the_table_in_order_and_keys_spread_over_servers():
    assert dense_ranges(10, 3) == [(0, 4), (4, 7), (7, 10)]
    assert dense_ranges(2, 3) == [(0, 1), (1, 2), (2, 2)]
    counts = np.bincount(sparse_servers(np.arange(100_000, dtype=np.int64), 4))
    assert counts.min() > 24_000


def test_initial_rows_depend_only_on_seed_and_key():
    keys = np.array([5, -3, 1 << 40, 7], dtype=np.int64)
    init = ps.Uniform(-1, 1, seed=3)
    rows = init.rows(keys, 4)
    np.testing.assert_array_equal(init.rows(keys[::-1], 4), rows[::-1])
    np.testing.assert_array_equal(init.rows(keys[1:2], 4), rows[1:2])
    assert not np.array_equal(ps.Uniform(-1, 1, seed=4).rows(keys, 4), rows)
    assert rows.min() >= -1 and rows.max() < 1
    normal = ps.Normal(0, 1, seed=1).rows(np.arange(20_000, dtype=np.int64), 4)
    assert abs(normal.mean()) < 0.02 and abs(normal.std() - 1) < 0.02


def test_key_index_finds_every_inserted_key_across_growth():
    rng = np.random.default_rng(0)
    index, seen = KeyIndex(), {}
    for _ in range(10):
        keys = np.unique(rng.integers(-(1 << 62), 1 << 62, 5000))
        rows = index.lookup(keys)
        assert (rows == [seen.get(k, -1) for k in keys.tolist()]).all()
        new = keys[rows < 0]
        index.insert(new, np.arange(len(seen), len(seen) + len(new)))
        seen.update(zip(new.tolist(), range(len(seen), len(seen) + len(new)), strict=True))


def test_sparse_rows_survive_growth_and_duplicate_keys_add_up():
    spec = TableSpec("e", "sparse", (2,), ps.SGD(lr=1.0).config(), ps.Constant(0).config(), "async")
    shard = SparseShard(spec)
    keys = np.arange(5000, dtype=np.int64)
    assert shard.pull(keys).shape == (5000, 2)
    k, g = merge_rows(np.array([3, 1, 3]), np.ones((3, 2), np.float32))
    shard.apply(k, g)
    np.testing.assert_array_equal(shard.pull(np.array([1, 3, 4])), [[-1, -1], [-2, -2], [0, 0]])


def test_table_names_and_modes_are_checked():
    with pytest.raises(ps.TableError, match="table name 'a b'"):
        TableSpec("a b", "dense", (3,), {}, {}, "sync")
    with pytest.raises(ps.TableError, match="mode 'fast' is not one of"):
        TableSpec("a", "dense", (3,), {}, {}, "fast")


def test_role_errors_name_the_variable():
    env = {
        "TRAINING_ROLE": "PSERVER",
        "PADDLE_PSERVERS_IP_PORT_LIST": "127.0.0.1:5000",
        "PADDLE_TRAINERS_NUM": "1",
        "POD_IP": "127.0.0.1",
        "PADDLE_PORT": "6000",
    }
    with pytest.raises(RoleError, match=r"'127\.0\.0\.1:6000' is not in PADDLE_PSERVERS"):
        role_from_env(env)
    assert role_from_env(dict(env, PADDLE_PORT="5000")).server_index == 0
    with pytest.raises(RoleError, match="TRAINING_ROLE/PADDLE_ROLE='WORKER'"):
        role_from_env(dict(env, TRAINING_ROLE="WORKER"))
    with pytest.raises(RoleError, match=r"PADDLE_TRAINER_ID=2 is outside 0\.\.0"):
        role_from_env(dict(env, TRAINING_ROLE="TRAINER", PADDLE_TRAINER_ID="2"))
