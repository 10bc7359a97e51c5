"""The round loop's settings are compared at the rendezvous like the rest of the command;
a check that is off has no threshold to disagree on."""

from __future__ import annotations

from paddlike.launch.plan.agreement import agreed_round_settings


def test_the_defaults_and_every_field_of_a_check_that_runs():
    assert agreed_round_settings(0, 60.0, 0.1, "warn") == {
        "--max_restarts": "0",
        "--straggler_check": "60",
        "--straggler_threshold": "0.1",
        "--on_straggler": "warn",
    }


def test_with_the_check_off_its_threshold_and_action_are_moot():
    off = agreed_round_settings(2, 0.0, 0.5, "exclude")
    assert off == agreed_round_settings(2, 0.0, 0.1, "warn") == {
        "--max_restarts": "2",
        "--straggler_check": "0",
    }
