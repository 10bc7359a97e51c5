"""A launcher that meets another job's store (two `--hostfile` jobs on the same hosts)
is told so, not to check --ips / --host / --node_rank."""

from __future__ import annotations

from paddlike.launch.plan.agreement import claim_message
from paddlike.launch.plan.world import NodeEntry


def _entry(job: str | None, pid: int) -> NodeEntry:
    fingerprint = {"script": "train.py", **({"job_id": job} if job else {})}
    return NodeEntry(1, "198.18.0.3", "h1", pid, (6171,), fingerprint, job or "gen")


def test_a_store_of_another_job_is_named_with_both_job_ids() -> None:
    message = claim_message(_entry("job-a", 10), _entry("job-b", 20))
    assert message.startswith(
        "rendezvous: the launchers' store reached belongs to job job-a (this is job job-b): "
        "another job runs on these hosts (h1 (198.18.0.3, pid 10) holds node index 1)"
    )
    assert "--master_port" in message and "--ips" not in message


def test_one_jobs_two_claims_still_point_at_the_node_options() -> None:
    message = claim_message(_entry("job-a", 10), _entry("job-a", 20))
    assert "two launchers claim node index 1" in message and "--node_rank" in message
    assert "two launchers claim" in claim_message(_entry(None, 10), _entry(None, 20))
