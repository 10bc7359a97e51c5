"""options/values.py: one range checker for every number, and what it says."""

from __future__ import annotations

import pytest

from paddlike.launch.context.options.values import (
    ELASTIC_LEVEL,
    NON_NEGATIVE_INT,
    NON_NEGATIVE_SECONDS,
    PORT,
    POSITIVE_INT,
    POSITIVE_SECONDS,
    BadValue,
    in_range,
)


@pytest.mark.parametrize(
    ("check", "good", "bad"),
    [
        (POSITIVE_INT, {"1": 1, " 7 ": 7}, ["0", "-1", "1.5", "x", ""]),
        (NON_NEGATIVE_INT, {"0": 0, "3": 3}, ["-1", "x"]),
        (PORT, {"1": 1, "65535": 65535}, ["0", "65536", "http"]),
        (ELASTIC_LEVEL, {"-1": -1, "0": 0, "1": 1}, ["2", "-2", "one"]),
        (POSITIVE_SECONDS, {"0.5": 0.5, "1e3": 1000.0}, ["0", "-1", "inf", "nan", "x"]),
        (NON_NEGATIVE_SECONDS, {"0": 0.0, "2.5": 2.5}, ["-0.1", "inf", "nan"]),
    ],
)
def test_each_range_takes_its_numbers_and_refuses_the_rest(check, good, bad):
    for text, value in good.items():
        assert check(text) == value
    for text in bad:
        with pytest.raises(BadValue):
            check(text)


def test_the_message_is_the_ranges_words():
    with pytest.raises(BadValue, match=r"^expected a port number 1-65535$"):
        PORT("0")
    with pytest.raises(BadValue, match=r"^expected a number of seconds > 0$"):
        POSITIVE_SECONDS("nan")


def test_an_open_lower_bound_and_an_infinite_upper_one():
    interval = in_range(float, "expected > 0", 0, above=True)
    assert interval("inf") == float("inf")
    with pytest.raises(BadValue, match="expected > 0"):
        interval("0")


def test_word_values_are_taken_in_any_case():
    from paddlike.launch.context.options.values import ON_HANG, ON_STRAGGLER, RUN_MODE

    assert (ON_STRAGGLER("EXCLUDE"), ON_HANG("Abort"), RUN_MODE("PS")) == ("exclude", "abort", "ps")


@pytest.mark.parametrize("given", ["0.001", "0.5"])
def test_a_straggler_check_under_a_second_is_refused(given):
    from paddlike.launch.context.options.values import BadValue, straggler_period

    with pytest.raises(BadValue, match=r"expected 0 \(off\) or a number of seconds >= 1"):
        straggler_period(given)
    assert (straggler_period("0"), straggler_period("1")) == (0.0, 1.0)
