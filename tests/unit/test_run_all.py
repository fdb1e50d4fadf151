"""benchmarks/run_all.py: the JSON a benchmark prints, however it prints it."""

from __future__ import annotations

import json

from benchmarks import run_all


def test_parse_reads_indented_objects_one_per_line_and_skips_other_text():
    first = {"figure": "stuck", "nested": {"a": [1, {"b": 2}]}}
    second = {"figure": "healthy", "text": "a { brace in a string }"}
    out = ("progress: {not json}\n" + json.dumps(first, indent=1) + "\n"
           + json.dumps(second) + "\ndone\n")
    assert run_all.parse(out) == [first, second]
    assert run_all.parse("nothing here\n") == []
