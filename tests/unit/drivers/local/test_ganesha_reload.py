"""Reading NFS-Ganesha's log after a re-read (drivers/local/ganesha_reload.py):
the errors of one re-read, with the file and line each is on. With the real
server every re-read of the functional tests goes through it
(test_local_access.py, test_local_access_sweep.py), all without errors: the
driver writes no client Ganesha rejects, so its leaving-out and roll-back
paths are checked here only."""

from __future__ import annotations

import os
import signal

from sharemgr.drivers.local import ganesha_reload

# As Ganesha 4.3 logs a re-read that drops an export (trimmed prefixes).
LOG = """\
x[sigmgr] sigmgr_thread :MAIN :EVENT :Received SIGHUP.... initiating export list reload
x[sigmgr] client_commit :CONFIG :CRIT :No clients specified
x[sigmgr] reread_exports :CONFIG :EVENT :Reread exports complete
x :CRIT :Config File (/s/exports.conf:12): Expected a client, got a file path name for (0.0.0.0/0)
x :CRIT :Config File (/s/exports.conf:2): Errors processing block (EXPORT)
x[sigmgr] ganesha_yyerror :CONFIG :CRIT :Config file (/s/exports.conf:7) error: syntax error
"""


def test_errors_name_their_file_and_line():
    errors = ganesha_reload.errors_in(LOG)
    assert [(e.path, e.line) for e in errors] == [("/s/exports.conf", 12),
                                                 ("/s/exports.conf", 2),
                                                 ("/s/exports.conf", 7)]
    assert errors[0].text == "Expected a client, got a file path name for (0.0.0.0/0)"
    assert errors[2].text == "syntax error"


def test_a_clean_reread_has_no_errors():
    assert ganesha_reload.errors_in(LOG.splitlines()[0] + "\nReread exports complete\n") == []


def test_only_the_first_reread_s_errors_count(tmp_path, monkeypatch):
    """Errors a re-read logs come after its "complete"; the second SIGHUP's
    "Received" line closes them off, and what an earlier re-read logged late
    is before the first "Received" line."""
    log = tmp_path / "ganesha.log"
    log.write_text("x Config File (/s/exports.conf:99): stale, from before\n")
    sent = []

    def fake_signal(pid, sig):
        assert (pid, sig) == (os.getpid(), signal.SIGHUP)
        sent.append(sig)
        with open(log, "a") as f:
            f.write(LOG if len(sent) == 1 else
                    "Received SIGHUP\nConfig File (/s/exports.conf:50): the second's\n"
                    "Reread exports complete\n")

    monkeypatch.setattr(ganesha_reload.process, "signal_pid", fake_signal)
    errors = ganesha_reload.reload(os.getpid(), log)
    assert len(sent) == 2
    assert sorted(e.line for e in errors) == [2, 7, 12]


def test_a_server_that_logs_nothing_is_not_judged(tmp_path, monkeypatch):
    monkeypatch.setattr(ganesha_reload, "TIMEOUT", 0.05)
    monkeypatch.setattr(ganesha_reload.process, "signal_pid", lambda pid, sig: None)
    assert ganesha_reload.reload(1, tmp_path / "none.log") == []


def _server(tmp_path, monkeypatch, answers):
    """A GaneshaServer whose server 'runs' and whose re-reads answer
    ``answers`` in turn (errors on the exports file's lines)."""
    from sharemgr.drivers.local import ganesha

    server = ganesha.GaneshaServer(tmp_path, "127.0.0.1", 2049, manage=True)
    tmp_path.mkdir(exist_ok=True)
    monkeypatch.setattr(ganesha.process, "pid_of", lambda *a: 4242)
    seen = []

    def reread(pid):
        seen.append(server.exports_file.read_text())
        lines = answers.pop(0) if answers else []
        return [ganesha_reload.ConfigError(str(server.exports_file), n, "rejected")
                for n in lines]

    monkeypatch.setattr(server, "_reload", reread)
    return ganesha, server, seen


def test_a_rejected_client_is_left_out_and_the_rest_served(tmp_path, monkeypatch):
    ganesha, server, seen = _server(tmp_path, monkeypatch, [[11, 1]])
    exports = [ganesha.NfsExport("s1", 1, tmp_path / "m", (("10.0.0.1", "rw"), ("10.0.0.2", "ro")),
                                 ("r1", "r2"))]
    left_out = server.write_exports(exports)  # line 11: r1's CLIENT line
    assert set(left_out) == {"r1"} and "rejected" in left_out["r1"]
    assert "10.0.0.1" in seen[0] and "10.0.0.1" not in seen[1] and "10.0.0.2" in seen[1]
    assert server.last_good.read_text() == seen[1]


def test_a_rejection_of_no_rule_rolls_back_to_the_last_good(tmp_path, monkeypatch):
    import pytest
    from sharemgr.drivers.exceptions import ShareBackendException

    ganesha, server, seen = _server(tmp_path, monkeypatch, [[], [3]])
    good = [ganesha.NfsExport("s1", 1, tmp_path / "m", (("10.0.0.1", "rw"),), ("r1",))]
    server.write_exports(good)
    with pytest.raises(ShareBackendException, match="the last exports it took are back"):
        server.write_exports(good + [ganesha.NfsExport("s2", 2, tmp_path / "n", ())])
    assert server.exports_file.read_text() == seen[0] and "s2" not in seen[-1]
