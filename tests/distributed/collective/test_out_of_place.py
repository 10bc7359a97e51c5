"""all_reduce into another array (`out=`) leaves its input alone, and all_to_all sends
column blocks without packing them: the two calls the global view's boxings build on."""

from __future__ import annotations

import pytest

from tests.support.collective_workers.launching import WORKERS, launch, logs


@pytest.mark.parametrize(("nproc", "transport"), [(2, "auto"), (3, "auto"), (2, "tcp")])
def test_all_reduce_into_out_leaves_the_input_and_all_to_all_takes_column_blocks(
    tmp_path, nproc, transport
):
    done = launch(
        tmp_path,
        WORKERS / "out_of_place.py",
        nproc=nproc,
        env={"PADDLIKE_CPU_TRANSPORT": transport},
    )
    assert done.returncode == 0, done.stdout + logs(tmp_path)
    text = logs(tmp_path)
    assert text.count("OK ") == nproc, text
    assert "overlap" in text  # an out that overlaps the input is refused, naming why
