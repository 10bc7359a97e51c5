"""What a worker's exit leaves in the log directory (`run.consequence`)."""

from __future__ import annotations

from paddlike.contract import ERROR_FILE
from paddlike.launch.run.consequence import drop_stray_temps


def test_a_workers_half_written_error_file_is_removed_once_it_exited(tmp_path):
    """A SIGKILL between the temporary file and its rename left it in the log directory (a
    fault-injection trial found it); the worker's own error file and others' files stay."""
    error_file = tmp_path / "workerlog.0.error.json"
    error_file.write_text("{}")
    stray = tmp_path / ".workerlog.0.error.json.4242.1a2b3c4d.tmp"
    stray.write_text('{"mess')
    # another worker's, still writing
    other = tmp_path / ".workerlog.1.error.json.4243.5e6f7a8b.tmp"
    other.write_text("")
    drop_stray_temps({ERROR_FILE: str(error_file)})
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([error_file.name, other.name])
    drop_stray_temps({})  # no error file given: nothing to do
