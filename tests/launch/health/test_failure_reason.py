"""Why a failed check ends the job instead of leaving the node out (issue 35, the user
trial's third point: an elastic job whose slow node is node 0, the store's host)."""

from __future__ import annotations

import pytest

from paddlike.launch.health.gate import why_not_left_out
from paddlike.launch.plan.membership import ElasticSpec


def test_a_slow_store_host_in_an_elastic_job_is_named_as_the_store_not_as_a_missing_spare():
    reason = why_not_left_out(ElasticSpec(3, 4), 4, (0,))
    assert reason.startswith("node 0 hosts the launchers' store (--master)")
    assert "etcd://" in reason and "spare" not in reason


@pytest.mark.parametrize(
    ("spec", "n", "bad", "expected"),
    [
        (None, 4, (3,), "no spare node can take the place of the node at fault"),
        (
            ElasticSpec(4, 5),
            4,
            (2,),
            "without the nodes at fault 3 nodes would be left, under --nnodes 4:5's minimum",
        ),
    ],
)
def test_other_jobs_say_why_they_cannot_go_on(spec, n, bad, expected):
    assert why_not_left_out(spec, n, bad) == expected
