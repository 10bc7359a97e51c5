"""When a second ending signal means "kill the workers now" (`signals.ending_again`)."""

from __future__ import annotations

import signal

from paddlike.launch.run.signals import ending_again


def test_only_this_launchers_own_repeated_signal_escalates_and_never_a_hang_up() -> None:
    seen: list[int] = []
    assert not ending_again(seen, signal.SIGINT)  # the first: the grace
    assert ending_again(seen, signal.SIGINT)  # the user's second Ctrl-C: now
    hung: list[int] = []
    assert not ending_again(hung, signal.SIGHUP)
    assert not ending_again(hung, signal.SIGHUP)  # the eof watch's and sshd's: one ending
    assert ending_again(hung, signal.SIGTERM)  # a user's signal after it: now
