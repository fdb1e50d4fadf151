"""What sharectl prints when a command meets an exception it has no message
for (a bug): its type and text on one line, never an empty line. A fault
run's ``share shrink`` once exited 1 with nothing but an empty line, cliff's
print of a bare ``assert``'s exception."""

from __future__ import annotations

import pytest
from sharemgr.cli import app, context
from sharemgr.cli.base import EXIT_ERROR_STATUS


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
    """cliff refuses ``-c`` naming no column with a ValueError: the user's
    mistake, exit 2 and cliff's one line, not a bug's."""
    conf = tmp_path / "sharemgr.conf"
    conf.write_text(f"[DEFAULT]\nstate_path = {tmp_path}\nenabled_share_backends = dummy\n"
                    "[dummy]\nshare_driver = dummy\n")
    assert app.main(["--config-file", str(conf), "db", "sync"]) == 0
    capsys.readouterr()
    assert app.main(["--config-file", str(conf), "share", "list", "-c", "nope"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("sharectl: error: No recognized column names in ['nope']")
