"""The ps-heter runtime: stages from the environment, the stage channel, the CTR example."""

from __future__ import annotations

import re
import threading
import time

import numpy as np
import pytest

from paddlike.distributed import ps
from paddlike.distributed.ps import auth
from paddlike.distributed.ps.role import Role, role_from_env
from paddlike.distributed.ps.stage import StageRoleError, stage_role_from_env
from paddlike.distributed.ps.stage_channel import (
    StageError,
    StageReceiver,
    StageSender,
    StageTimeoutError,
)
from tests.support.ps_workers.cluster import REPO, free_ports, ps_job
from tests.support.ps_workers.heter_cluster import heter_env, heter_job

S = ["127.0.0.1:6000", "127.0.0.1:6001"]
T = ["127.0.0.1:6100", "127.0.0.1:6101", "127.0.0.1:6102", "127.0.0.1:6103"]
H2 = ["127.0.0.1:6200", "127.0.0.1:6201"]
H3 = ["127.0.0.1:6300"]


# --- stages from the environment ---------------------------------------------------
def test_the_test_environment_follows_the_issue_table_for_one_heter_stage():
    envs = heter_env(S, T[:2], [H2[:1]], ["cpu"])
    assert sorted(envs) == ["heter.2.0", "server.0", "server.1", "trainer.0", "trainer.1"]
    every = {
        "PADDLE_PSERVERS_IP_PORT_LIST": ",".join(S),
        "PADDLE_TRAINER_ENDPOINTS": "127.0.0.1:6100,127.0.0.1:6101",
        "PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST": "127.0.0.1:6200",
        "PADDLE_TRAINERS_NUM": "2",
        "STAGE_NUM": "2",
        "PADDLE_STAGE_TRAINERS_NUM": "[2, 1]",
    }
    for env in envs.values():
        assert every.items() <= env.items()
    assert envs["trainer.1"] == dict(
        every,
        POD_IP="127.0.0.1",
        PADDLE_PORT="6101",
        TRAINING_ROLE="TRAINER",
        PADDLE_TRAINER_ID="1",
        STAGE_ID="1",
        PADDLE_PREVIOUS_HETER_TRAINER_IP_PORT_LIST="",
        PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST="127.0.0.1:6200",
        HETER_DEVICE_TYPE="cpu",
    )
    assert envs["heter.2.0"] == dict(
        every,
        POD_IP="127.0.0.1",
        PADDLE_PORT="6200",
        TRAINING_ROLE="HETER_TRAINER",
        STAGE_ID="2",
        PADDLE_PREVIOUS_HETER_TRAINER_IP_PORT_LIST="127.0.0.1:6100,127.0.0.1:6101",
        PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST="",
        HETER_DEVICE_TYPE="cpu",
    )


@pytest.mark.parametrize(
    ("name", "stage", "index", "endpoint", "previous", "next_peer", "senders"),
    [
        ("trainer.0", 1, 0, T[0], (), H2[0], None),
        ("trainer.3", 1, 3, T[3], (), H2[1], None),
        ("heter.2.0", 2, 0, H2[0], tuple(T), H3[0], {0: T[0], 2: T[2]}),
        ("heter.2.1", 2, 1, H2[1], tuple(T), H3[0], {1: T[1], 3: T[3]}),
        ("heter.3.0", 3, 0, H3[0], tuple(H2), None, {0: H2[0], 1: H2[1]}),
    ],
)
def test_every_process_of_a_two_heter_stage_job_knows_its_stage_and_neighbours(
    name, stage, index, endpoint, previous, next_peer, senders
):
    env = heter_env(S, T, [H2, H3], ["cpu", "gpu"])[name]
    role = stage_role_from_env(env)
    assert (role.stage_id, role.stage_num, role.index, role.endpoint) == (
        stage,
        3,
        index,
        endpoint,
    )
    assert role.is_heter == (stage > 1)
    assert role.previous == previous
    assert (role.next_peer if role.next else None) == next_peer
    if senders is not None:
        assert role.senders() == senders


def test_stage_readers_describe_a_plain_ps_job_as_one_stage(monkeypatch):
    for var in ("STAGE_ID", "STAGE_NUM", "TRAINING_ROLE", "PADDLE_ROLE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("TRAINING_ROLE", "TRAINER")
    assert (ps.is_heter_worker(), ps.stage_id(), ps.stage_num()) == (False, 1, 1)
    monkeypatch.setenv("TRAINING_ROLE", "HETER_TRAINER")
    monkeypatch.setenv("STAGE_ID", "2")
    monkeypatch.setenv("STAGE_NUM", "3")
    assert (ps.is_heter_worker(), ps.stage_id(), ps.stage_num()) == (True, 2, 3)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"STAGE_ID": ""}, r"^STAGE_ID is not set: a heter trainer needs it"),
        ({"STAGE_ID": "1"}, r"^STAGE_ID=1 with STAGE_NUM=2: a heter trainer's stage is 2..2"),
        ({"POD_IP": "127.0.0.9"}, r"endpoint '127.0.0.9:6200' is not among stage 2's"),
        ({"PADDLE_STAGE_TRAINERS_NUM": "two"}, r"PADDLE_STAGE_TRAINERS_NUM='two': expected a"),
        ({"PADDLE_PREVIOUS_HETER_TRAINER_IP_PORT_LIST": "host"}, r"entry 'host' is not host:port"),
    ],
)
def test_a_heter_environment_that_cannot_work_is_an_error_naming_the_variable(change, message):
    env = dict(heter_env(S, T[:2], [H2[:1]], ["cpu"])["heter.2.0"], **change)
    with pytest.raises(StageRoleError, match=message):
        stage_role_from_env(env)


def test_a_heter_trainer_is_a_ps_role_with_the_servers_but_without_a_trainer_id():
    role = role_from_env(heter_env(S, T[:2], [H2[:1]], ["cpu"])["heter.2.0"])
    assert role.role is Role.HETER_TRAINER
    assert (role.server_endpoints, role.trainers_num, role.trainer_id) == (tuple(S), 2, -1)


# --- the channel, in one process ------------------------------------------------------
@pytest.fixture
def endpoint():
    return f"127.0.0.1:{free_ports(1)[0]}"


@pytest.fixture
def channel(endpoint):
    """A heter trainer's receiver for trainers 0 and 1, and a sender for each trainer."""
    opened = []

    def make(max_in_flight=4, timeout=10.0):
        receiver = StageReceiver(
            endpoint, stage=2, index=0, senders={0: T[0], 1: T[1]}, timeout=timeout
        )
        senders = [
            StageSender(endpoint, stage=1, index=i, max_in_flight=max_in_flight, timeout=timeout)
            for i in range(2)
        ]
        opened.extend([receiver, *senders])
        return receiver, senders

    yield make
    for end in opened:
        end.close()


def test_a_batch_and_its_answer_round_trip_with_trainer_and_batch_ids(channel):
    receiver, (t0, _) = channel()
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    t0.send_forward(x, batch_id=7)
    trainer_id, batch_id, got = receiver.recv_forward()
    assert (trainer_id, batch_id) == (0, 7)
    np.testing.assert_array_equal(got, x)
    receiver.send_backward(got * 2, 7)
    np.testing.assert_array_equal(t0.recv_backward(7), x * 2)


def test_a_tuple_of_arrays_arrives_as_a_tuple_with_dtypes_and_shapes_kept(channel):
    receiver, (t0, _) = channel()
    sent = (
        np.ones((2, 3, 4), np.float16),
        np.arange(5, dtype=np.int64),
        np.array(3.5),
        np.zeros((0, 8), np.float32),
    )
    t0.send_forward(sent, batch_id=0)
    _, _, got = receiver.recv_forward()
    assert isinstance(got, tuple) and len(got) == 4
    for a, b in zip(sent, got, strict=True):
        assert (a.dtype, a.shape) == (b.dtype, b.shape)
        np.testing.assert_array_equal(a, b)


def test_a_torch_tensor_that_requires_grad_travels_as_its_values(channel):
    torch = pytest.importorskip("torch")
    receiver, (t0, _) = channel()
    t0.send_forward(torch.ones(2, 3, requires_grad=True) * 2, batch_id=0)
    _, _, got = receiver.recv_forward()
    np.testing.assert_array_equal(got, np.full((2, 3), 2, np.float32))


def test_two_trainers_feed_one_heter_trainer_and_each_gets_its_own_answers(channel):
    receiver, senders = channel()
    for b in range(3):
        for i, s in enumerate(senders):
            s.send_forward(np.full(4, 10 * i + b, np.float32), batch_id=b)
    seen = []
    for _ in range(6):
        tid, b, x = receiver.recv_forward()
        seen.append((tid, b))
        receiver.send_backward(x + 1000, b, trainer_id=tid)
    assert sorted(seen) == [(t, b) for t in range(2) for b in range(3)]
    for i, s in enumerate(senders):
        for b in range(3):
            np.testing.assert_array_equal(s.recv_backward(b), np.full(4, 10 * i + b + 1000))
    ends = [threading.Thread(target=s.end) for s in senders]  # end() waits for the ack
    for t in ends:
        t.start()
    assert receiver.recv_forward() is None  # every sender ended
    for t in ends:
        t.join()
    assert all(s.ended for s in senders)


def test_an_answer_for_a_batch_id_two_trainers_share_needs_the_trainer_id(channel):
    receiver, senders = channel()
    for s in senders:
        s.send_forward(np.zeros(2, np.float32), batch_id=5)
    receiver.recv_forward(), receiver.recv_forward()
    with pytest.raises(ValueError, match=r"batch 5 is unanswered for trainers \[0, 1\]; pass"):
        receiver.send_backward(np.zeros(2, np.float32), 5)
    with pytest.raises(ValueError, match=r"no unanswered batch 6 \(unanswered: trainer 0 batch 5"):
        receiver.send_backward(np.zeros(2, np.float32), 6)


def test_a_sender_blocks_at_max_in_flight_until_an_answer_comes_then_times_out(channel):
    receiver, (t0, _) = channel(max_in_flight=2)
    t0.send_forward(np.zeros(1, np.float32), 0)
    t0.send_forward(np.zeros(1, np.float32), 1)
    started = time.monotonic()
    with pytest.raises(StageTimeoutError, match=r"has not answered batch 0 .*max_in_flight=2"):
        t0.send_forward(np.zeros(1, np.float32), 2, timeout=0.3)
    assert 0.3 <= time.monotonic() - started < 3
    got = [receiver.recv_forward(timeout=2)[1] for _ in range(2)]
    assert got == [0, 1]  # the third batch never left the trainer
    with pytest.raises(StageTimeoutError):
        receiver.recv_forward(timeout=0.2)
    receiver.send_backward(np.zeros(1, np.float32), 0)
    t0.send_forward(np.zeros(1, np.float32), 2, timeout=5)  # one answer frees one slot
    assert receiver.recv_forward(timeout=5)[1] == 2
    np.testing.assert_array_equal(t0.recv_backward(0), np.zeros(1, np.float32))


def test_a_sender_with_another_job_token_is_refused_at_once_with_the_reason(endpoint):
    receiver = StageReceiver(
        endpoint, stage=2, index=0, senders={0: T[0]}, policy=auth.Policy.create("right", None)
    )
    sender = StageSender(
        endpoint, stage=1, index=0, timeout=30, policy=auth.Policy.create("wrong", None)
    )
    try:
        sender.send_forward(np.zeros(1, np.float32), 0)
        started = time.monotonic()
        with pytest.raises(auth.AuthError, match=r"heter trainer 0 of stage 2 at .* refused"):
            sender.recv_backward(0)
        assert time.monotonic() - started < 10
    finally:
        sender.close()
        receiver.close()


def test_a_sender_the_heter_trainer_does_not_expect_is_refused_and_both_sides_say_why(endpoint):
    receiver = StageReceiver(endpoint, stage=2, index=0, senders={0: T[0]}, timeout=5)
    sender = StageSender(endpoint, stage=1, index=1, timeout=5)
    try:
        sender.send_forward(np.zeros(1, np.float32), 0)
        why = r"receives from members \[0\] of stage 1, not from trainer 1"
        with pytest.raises(
            StageError, match=r"^heter trainer 0 of stage 2 at .*: refused a sender"
        ):
            receiver.recv_forward()
        with pytest.raises(StageError, match=rf"^trainer 1: .* refused this sender: .*{why}"):
            sender.recv_backward(0)
    finally:
        sender.close()
        receiver.close()


def test_a_heter_trainer_that_no_trainer_feeds_finishes_at_once(endpoint):
    receiver = StageReceiver(endpoint, stage=2, index=1, senders={}, timeout=5)
    try:
        assert receiver.recv_forward() is None
    finally:
        receiver.close()


def test_a_receiver_waiting_for_a_trainer_that_never_comes_names_it_at_the_deadline(endpoint):
    receiver = StageReceiver(endpoint, stage=2, index=0, senders={0: T[0], 1: T[1]}, timeout=0.5)
    sender = StageSender(endpoint, stage=1, index=0, timeout=5)
    try:
        sender.send_forward(np.zeros(1, np.float32), 0)
        receiver.send_backward(np.zeros(1, np.float32), receiver.recv_forward().batch_id)
        with pytest.raises(
            StageTimeoutError,
            match=r"waited 0.5 s \(PADDLIKE_TIMEOUT\) for a batch: trainer 0 \(127.0.0.1:6100\) "
            r"sent 1 batches, the last 0; trainer 1 \(127.0.0.1:6101\) never connected",
        ):
            receiver.recv_forward()
    finally:
        sender.close()
        receiver.close()


# --- real processes ---------------------------------------------------------------------
def test_two_trainers_and_a_heter_trainer_of_a_job_with_a_token_finish_cleanly(tmp_path):
    env = {"PADDLIKE_JOB_TOKEN": "a-job-token"}
    with heter_job(tmp_path, "heter_echo.py", ["--batches", "6"], servers=0, extra_env=env) as job:
        job.check(timeout=60)
        assert "heter 0 of stage 2: done, trainer 0: 6, trainer 1: 6" in job.log("heter.2.0")
        assert "trainer 1: 6 batches answered" in job.log("trainer.1")


def test_four_trainers_feed_two_heter_trainers_by_trainer_id_modulo_their_count(tmp_path):
    with heter_job(tmp_path, "heter_echo.py", [], servers=0, trainers=4, stages=[2]) as job:
        job.check(timeout=60)
        assert "done, trainer 0: 5, trainer 2: 5" in job.log("heter.2.0")
        assert "done, trainer 1: 5, trainer 3: 5" in job.log("heter.2.1")


def test_batches_pass_through_two_heter_stages_and_every_stage_ends_cleanly(tmp_path):
    with heter_job(tmp_path, "heter_chain.py", servers=0, trainers=2, stages=[1, 1]) as job:
        job.check(timeout=60)
        assert "stage 2 of 3: done, 8 batches" in job.log("heter.2.0")
        assert "stage 3 of 3: done, 8 batches" in job.log("heter.3.0")


@pytest.mark.timeout(60)
def test_a_trainer_killed_mid_batch_makes_the_heter_trainer_fail_naming_it_at_once(tmp_path):
    env = {"PADDLIKE_TIMEOUT": "100"}  # the error must come from the death, not a deadline
    args = ["--batches", "50", "--die_after", "2"]
    with heter_job(tmp_path, "heter_echo.py", args, servers=0, extra_env=env) as job:
        assert job.wait("trainer.1", 30) == -9
        died = time.monotonic()
        assert job.wait("heter.2.0", 20) == 1, job.all_logs()
        assert time.monotonic() - died < 10
        port = job.envs["trainer.1"]["PADDLE_PORT"]
        assert re.search(
            rf"StageError: heter trainer 0 of stage 2 at \S+: trainer 1 \(127.0.0.1:{port}\) "
            r"disconnected without ending its stream \(it sent \d+ batches",
            job.log("heter.2.0"),
        ), job.log("heter.2.0")


@pytest.mark.timeout(60)
def test_a_trainer_that_hangs_is_named_after_the_heartbeat_timeout_not_the_deadline(tmp_path):
    env = {"PADDLIKE_TIMEOUT": "100"}
    args = ["--batches", "50", "--stop_after", "2", "--heartbeat_timeout", "2"]
    with heter_job(tmp_path, "heter_echo.py", args, servers=0, extra_env=env) as job:
        started = time.monotonic()
        assert job.wait("heter.2.0", 30) == 1, job.all_logs()
        assert time.monotonic() - started < 15
        assert job.procs["trainer.1"].poll() is None  # stopped, not dead
        port = job.envs["trainer.1"]["PADDLE_PORT"]
        assert re.search(
            rf"trainer 1 \(127.0.0.1:{port}\) disconnected without ending its stream .*: it "
            r"exited, or was silent for 2 s \(hung, or the network failed\)",
            job.log("heter.2.0"),
        ), job.log("heter.2.0")


@pytest.mark.timeout(60)
def test_a_heter_trainer_killed_mid_batch_makes_the_trainers_fail_naming_it(tmp_path):
    env = {"PADDLIKE_TIMEOUT": "100"}
    args = ["--batches", "50", "--heter_die_after", "3"]
    with heter_job(tmp_path, "heter_echo.py", args, servers=0, extra_env=env) as job:
        assert job.wait("heter.2.0", 30) == -9
        port = job.envs["heter.2.0"]["PADDLE_PORT"]
        for t in ("trainer.0", "trainer.1"):
            assert job.wait(t, 10) == 1, job.all_logs()
            assert re.search(
                rf"StageError: trainer \d: heter trainer 0 of stage 2 at 127.0.0.1:{port} "
                r"closed the connection( with batches \[[\d, ]+\] unanswered)?: it exited, or",
                job.log(t),
            ), job.log(t)


# --- the example ---------------------------------------------------------------------------
def _held_out_loss(log: str) -> float:
    found = re.search(r"held-out loss (\d+\.\d+)", log)
    assert found, log
    return float(found.group(1))


@pytest.mark.timeout(180)
def test_the_heter_ctr_example_reaches_the_loss_of_ps_ctr_in_sync_mode(tmp_path):
    steps = ["--steps", "150"]
    (tmp_path / "ps").mkdir()
    (tmp_path / "heter").mkdir()
    with ps_job(
        tmp_path / "ps", REPO / "examples" / "ps_ctr.py", ["--mode", "sync", *steps]
    ) as job:
        job.check(timeout=120)
        expected = _held_out_loss(job.log("t0"))
    script = REPO / "examples" / "ps_heter_ctr.py"
    with heter_job(tmp_path / "heter", script, steps, servers=2) as job:
        job.check(timeout=120)
        got = _held_out_loss(job.log("trainer.0"))
    assert abs(got - expected) <= 1e-3, (got, expected)
    assert got < 0.46
