"""Which unknown key a template refusal names (convergence/keys.py)."""

from __future__ import annotations

from sharemgr.convergence.keys import first_unknown


def test_the_first_unknown_key_in_sorted_order():
    assert first_unknown({"type": 1, "zeta": 2, "alpha": 3}, {"type"}) == "alpha"


def test_none_when_every_key_is_allowed():
    assert first_unknown({"type": 1, "properties": {}}, frozenset({"type", "properties"})) is None
    assert first_unknown({}, ()) is None


def test_keys_that_are_not_strings_are_named_as_text():
    assert first_unknown({1: "x", "type": "share"}, {"type"}) == "1"
