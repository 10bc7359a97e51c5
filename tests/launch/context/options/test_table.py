"""options/our_table.py: every option of ours is one row, and the rows agree with the
record the stages read (`record.LaunchOptions`: each option's field, its type and
default)."""

from __future__ import annotations

import pytest

from paddlike.launch.context.options import our_table, parse_options
from paddlike.launch.context.options.declare import CLUSTER, NODE
from paddlike.launch.context.options.record import LaunchOptions, Source

# read by parse_options and turned into another field (the token file into the token)
NOT_FIELDS = {"job_token_file"}


@pytest.mark.parametrize("option", our_table.OPTIONS, ids=lambda o: o.dest)
def test_each_row_fills_fields_of_the_record(option):
    fields = option.fields_of(object(), Source("flag", option.flags[0]))
    if option.dest in NOT_FIELDS:
        return
    assert set(fields) <= set(LaunchOptions._fields)
    assert option.dest in LaunchOptions._fields
    assert option.scope in (NODE, CLUSTER)


def test_each_spelling_names_one_option_and_each_option_is_one_row():
    spellings = [s for option in our_table.OPTIONS for s in option.flags]
    assert len(spellings) == len(set(spellings))
    assert len(our_table.BY_DEST) == len(our_table.OPTIONS)


def test_a_row_s_variables_feed_its_option():
    # the row of --nproc_per_node names Paddle's variable: that is all it takes
    assert "PADDLE_NPROC_PER_NODE" in our_table.BY_DEST["nproc_per_node"].variables
    assert parse_options(["t.py"], {"PADDLE_NPROC_PER_NODE": "3"}).nproc_per_node == 3


def test_a_row_s_into_makes_its_derived_fields():
    o = parse_options(["--nproc_per_node", "gpu", "t.py"], {})
    assert (o.nproc_per_node, o.nproc_per_node_kind) == (None, "gpu")
    o = parse_options(["--devices", "cpu", "t.py"], {})
    assert (o.gpus, o.cpu_only) == (None, True)
    o = parse_options(["t.py"], {"PADDLE_START_PORT": "7000"})
    assert (o.start_port, o.start_port_from) == (7000, "PADDLE_START_PORT")
