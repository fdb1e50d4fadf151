"""A template's converge_interval (self-healing stacks, daemon/heal.py)."""

from __future__ import annotations

import pytest
from sharemgr.convergence.template import TemplateError, template_from_dict

SHARE = {"resources": {"data": {"type": "share", "properties": {"size": 1, "proto": "NFS"}}}}


def test_converge_interval_round_trips():
    template = template_from_dict({**SHARE, "converge_interval": 30})
    assert template.converge_interval == 30
    assert template_from_dict(template.to_dict()).converge_interval == 30
    assert "converge_interval" not in template_from_dict(SHARE).to_dict()


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "30", 604801])
def test_bad_converge_interval(value):
    with pytest.raises(TemplateError, match="'converge_interval' must be a whole number"):
        template_from_dict({**SHARE, "converge_interval": value})
