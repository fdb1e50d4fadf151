"""What sharectl prints when a command meets an exception it has no message
for (a bug): its type and text on one line, never an empty line. A fault
run's ``share shrink`` once exited 1 with nothing but an empty line, cliff's
print of a bare ``assert``'s exception."""

from __future__ import annotations

import logging

import pytest
from sharemgr.cli import app, context
from sharemgr.cli.base import EXIT_ERROR_STATUS


@pytest.fixture(autouse=True)
def _root_logger_as_it_was():
    """Each sharectl run adds its console handler, on the stream of the
    test's capture, to the root logger (cliff; once per process in use):
    taken off after the test, or a later test's warning in this worker is
    written to a closed file ("--- Logging error ---")."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in [h for h in root.handlers if h not in handlers]:
        root.removeHandler(handler)
    root.setLevel(level)


@pytest.mark.parametrize("exc, shown", [
    (AssertionError(), "sharectl: unexpected error: AssertionError (--debug shows where)"),
    (KeyError("size"), "sharectl: unexpected error: KeyError: 'size' (--debug shows where)"),
])
def test_a_bug_is_named_on_one_line(monkeypatch, capsys, exc, shown):
    def broken(*_args, **_kw):
        raise exc

    monkeypatch.setattr(context, "Context", broken)
    assert app.main(["share", "list"]) == EXIT_ERROR_STATUS
    assert capsys.readouterr().err.splitlines() == [shown]


def test_debug_shows_the_traceback(monkeypatch, capsys):
    def broken(*_args, **_kw):
        raise AssertionError()

    monkeypatch.setattr(context, "Context", broken)
    assert app.main(["--debug", "share", "list"]) == EXIT_ERROR_STATUS
    err = capsys.readouterr().err
    assert "Traceback" in err and "AssertionError" in err


def test_a_column_no_listing_has_is_bad_input(tmp_path, capsys):
    """A ``-c`` naming no column is the user's mistake, exit 2 and one line,
    not a bug's; also beside a known one (cliff dropped it silently)."""
    conf = tmp_path / "sharemgr.conf"
    conf.write_text(f"[DEFAULT]\nstate_path = {tmp_path}\nenabled_share_backends = dummy\n"
                    "[dummy]\nshare_driver = dummy\n")
    assert app.main(["--config-file", str(conf), "db", "sync"]) == 0
    capsys.readouterr()
    for columns in (["-c", "nope"], ["-c", "id", "-c", "nope"]):
        assert app.main(["--config-file", str(conf), "share", "list", *columns]) == 2
        out, err = capsys.readouterr()
        (line,) = err.splitlines()
        assert line.startswith("sharectl: error: no column 'nope': the columns are id, name")
        assert out == ""  # nothing printed, the known column neither


def test_a_reader_that_stops_reading_ends_the_command_quietly(tmp_path, capsys):
    """``sharectl share list -f value -c id | head -1``: once the reader has
    gone, the write fails (EPIPE); sharectl stops with the status of a
    program SIGPIPE killed and no message, where it printed "unexpected
    error: BrokenPipeError" and exited 1. The pipe has no reader from the
    start here, so the write fails whenever it comes."""
    import os
    import subprocess
    import sys

    from sharemgr.cli.base import EXIT_BROKEN_PIPE

    conf = tmp_path / "sharemgr.conf"
    conf.write_text(f"[DEFAULT]\nstate_path = {tmp_path}\nenabled_share_backends = dummy\n"
                    "[dummy]\nshare_driver = dummy\n")
    assert app.main(["--config-file", str(conf), "db", "sync"]) == 0
    assert app.main(["--config-file", str(conf), "share", "create", "1", "--proto", "NFS",
                     "--backend", "dummy"]) == 0
    capsys.readouterr()
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([sys.executable, "-m", "sharemgr.cli.app", "--config-file",
                               str(conf), "share", "list", "-f", "value", "-c", "id"],
                              stdout=write, stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (EXIT_BROKEN_PIPE, "")


@pytest.mark.parametrize("command", [["message", "list"], ["request", "list"],
                                     ["reconcile", "list"]])
@pytest.mark.parametrize("limit", ["0", "-1"])
def test_a_limit_below_one_is_bad_input(tmp_path, capsys, command, limit):
    """``--limit 0`` (or a negative one) was taken and ignored: every row
    listed. It is refused, exit 2, saying why."""
    conf = tmp_path / "sharemgr.conf"
    conf.write_text(f"[DEFAULT]\nstate_path = {tmp_path}\n")
    with pytest.raises(SystemExit) as done:
        app.main(["--config-file", str(conf), *command, "--limit", limit])
    assert done.value.code == 2
    assert f"argument --limit: must be at least 1: {limit}" in capsys.readouterr().err


@pytest.mark.parametrize("command,option", [
    (["share", "create", "1", "--proto", "NFS", "--wait"], "--timeout"),
    (["reconcile", "run"], "--timeout"),
    (["stack", "delete", "web", "--wait"], "--wait-timeout"),
])
@pytest.mark.parametrize("seconds,why", [("-5", "must be more than 0 seconds: -5"),
                                         ("0", "must be more than 0 seconds: 0"),
                                         ("soon", "not a number of seconds: 'soon'")])
def test_a_timeout_that_is_not_a_time_is_bad_input(tmp_path, capsys, command, option,
                                                   seconds, why):
    """A negative timeout was taken: the wait gave up before its first look."""
    conf = tmp_path / "sharemgr.conf"
    conf.write_text(f"[DEFAULT]\nstate_path = {tmp_path}\n")
    with pytest.raises(SystemExit) as done:
        app.main(["--config-file", str(conf), *command, option, seconds])
    assert done.value.code == 2
    assert f"argument {option}: {why}" in capsys.readouterr().err


def test_reconcile_show_of_a_pass_that_is_not_there_names_it(tmp_path, capsys):
    conf = tmp_path / "sharemgr.conf"
    conf.write_text(f"[DEFAULT]\nstate_path = {tmp_path}\nhost = hostA\n")
    assert app.main(["--config-file", str(conf), "db", "sync"]) == 0
    capsys.readouterr()
    for given, said in ((["--id", "999"], "no reconciliation pass with id 999"),
                        (["--id", "0"], "no reconciliation pass with id 0"),
                        ([], "no reconciliation pass recorded for host hostA")):
        assert app.main(["--config-file", str(conf), "reconcile", "show", *given]) == 2
        assert capsys.readouterr().err == f"sharectl: error: {said}\n"
