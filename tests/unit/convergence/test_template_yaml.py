"""Reading a template's YAML: the two strict loaders, libyaml's (fast) and
the pure-Python one (the fallback, and the messages)."""

from __future__ import annotations

import pytest
from sharemgr.convergence import template, template_yaml

from tests.unit.convergence.test_template import EXAMPLE

LOADERS = [template_yaml._StrictLoader, template_yaml._FastStrictLoader]


@pytest.mark.parametrize("loader", LOADERS, ids=lambda c: c.__name__)
def test_each_loader_refuses_a_duplicate_key_at_its_place(loader):
    import yaml

    text = "resources:\n  a: {type: share_server}\n  b:\n    type: share_group\n    type: x\n"
    with pytest.raises(yaml.constructor.ConstructorError) as info:
        yaml.load(text, Loader=loader)  # noqa: S506 - SafeLoader subclasses
    assert "duplicate key 'type'" in str(info.value.problem)
    assert (info.value.problem_mark.line, info.value.problem_mark.column) == (4, 4)


@pytest.mark.parametrize("loader", LOADERS, ids=lambda c: c.__name__)
def test_each_loader_reads_what_safe_load_reads(loader):
    import yaml

    assert yaml.load(EXAMPLE, Loader=loader) == yaml.safe_load(EXAMPLE)  # noqa: S506


def test_the_fast_loader_is_libyamls_where_pyyaml_has_it():
    import yaml

    if not getattr(yaml, "__with_libyaml__", False):
        pytest.skip("PyYAML without libyaml: the fallback is the pure-Python loader")
    assert issubclass(template_yaml._FastStrictLoader, yaml.CSafeLoader)


@pytest.mark.parametrize("text", [
    "resources:\n  a: {type: share_server}\n  a: {type: share_group}\n",
    "resources:\n  a: [1, 2\n",
    "resources: {a: {type: share_server}}\n  b: x\n",
])
def test_messages_are_the_same_with_or_without_libyaml(monkeypatch, text):
    with pytest.raises(template.TemplateError) as fast:
        template.parse(text)
    monkeypatch.setattr(template_yaml, "_FastStrictLoader", template_yaml._StrictLoader)
    with pytest.raises(template.TemplateError) as pure:
        template.parse(text)
    assert str(fast.value) == str(pure.value)
    assert "line" in str(pure.value) and "column" in str(pure.value)
