"""The suite runs as from a terminal however it was started: a background job of a
non-interactive shell starts with SIGINT and SIGQUIT ignored, and every process a test
starts would inherit that (a Ctrl-C test's reader then deaf to its SIGINT). Tests that
start a launcher with signals ignored say so themselves (`ignoring=`)."""

import signal

for _sig, _handler in (
    (signal.SIGINT, signal.default_int_handler),
    (signal.SIGQUIT, signal.SIG_DFL),
):
    if signal.getsignal(_sig) is signal.SIG_IGN:
        signal.signal(_sig, _handler)
