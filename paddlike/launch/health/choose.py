"""Spares (issue 35): a hostfile with more hosts than --num_nodes N. The one-command start
first runs every host's launcher in *check-only* mode (`CHECK_ONLY_ENV`): they meet as one
job of all the hosts, run the pre-flight check together (so that each host's links are
measured against several peers, even where N is 2) and end without starting a worker:
0 where the host is healthy, `LEFT_OUT` (69) where the check found it at fault.
The starter then starts the job on the first N healthy hosts in the hostfile's order
(`cluster.spares`); the other healthy ones stand by.

| the check found this node | its launcher (check-only)                          | exit |
| ------------------------- | -------------------------------------------------- | ---- |
| healthy                   | says so; the starter chooses                       | 0    |
| at fault                  | names its figure; starts nothing                   | 69   |
| (figures did not come)    | as an ordinary check (`gate.check_before_start`)   | 2    |
"""

from __future__ import annotations

from collections.abc import Mapping

from paddlike.contract import PREFLIGHT_CHOSEN, PREFLIGHT_ONLY

CHECK_ONLY_ENV = PREFLIGHT_ONLY  # set by the one-command start, never by users
# the starter's line on who runs (`cluster.spares.choice_line`), for the chosen hosts'
# launchers to say too, so that every node's console names who runs and who was left out
CHOSEN_ENV = PREFLIGHT_CHOSEN


def check_only(environ: Mapping[str, str]) -> bool:
    """Whether this launcher only checks its node and links for the starter to choose."""
    return environ.get(CHECK_ONLY_ENV, "") == "1"
