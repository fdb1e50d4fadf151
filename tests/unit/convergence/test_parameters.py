"""Template parameters (convergence/parameters.py): declarations, values from
-P and environments, constraints, get_param substitution, the stored form."""

from __future__ import annotations

import pytest
from sharemgr.convergence import parameters as params
from sharemgr.convergence import template

T = """
parameters:
  size: {type: number, default: 2, constraints: [{range: {min: 1, max: 10}}]}
  proto: {type: string, constraints: [{allowed_values: [NFS, CIFS]}]}
  name: {type: string, hidden: true, default: abc,
         constraints: [{length: {min: 2, max: 8}}, {allowed_pattern: "[a-z]+"}]}
  protos: {type: comma_delimited_list, default: "NFS, CIFS"}
  extra: {type: json, default: {tier: {level: gold}}}
  flag: {type: boolean, default: false}
resources:
  a:
    type: share
    properties: {size: {get_param: size}, proto: {get_param: proto}, name: {get_param: name}}
  b:
    type: share
    properties: {size: 1, proto: {get_param: [protos, 1]}, name: {get_param: [extra, tier, level]}}
outputs:
  flag: {get_param: flag}
"""


def test_values_are_substituted_where_properties_and_outputs_go():
    t = template.parse(T, {"proto": "NFS", "size": "3"})
    assert t.resources["a"].properties == {"size": 3, "proto": "NFS", "name": "abc"}
    assert t.resources["b"].properties == {"size": 1, "proto": "CIFS", "name": "gold"}
    assert t.outputs == {"flag": False}
    assert t.parameters == {"size": 3, "proto": "NFS", "name": "******",
                            "protos": ["NFS", "CIFS"], "extra": {"tier": {"level": "gold"}},
                            "flag": False}


def test_the_stored_form_keeps_the_given_values_and_reads_back_the_same():
    t = template.parse(T, {"proto": "CIFS"})
    stored = t.to_dict()
    assert stored["parameter_values"] == {"proto": "CIFS"}
    back = template.template_from_dict(stored)
    assert back.resources == t.resources and back.parameters == t.parameters


@pytest.mark.parametrize("given, message", [
    ({}, "parameter 'proto': no value given and no default"),
    ({"proto": "NFS", "size": "11"}, "parameter 'size': must be at most 10"),
    ({"proto": "NFS", "size": "x"}, "parameter 'size': must be a number"),
    ({"proto": "GLUSTER"}, "parameter 'proto': must be one of NFS, CIFS"),
    ({"proto": "NFS", "name": "a"}, "parameter 'name': length must be at least 2"),
    ({"proto": "NFS", "name": "AB"}, "parameter 'name': must match the pattern"),
    ({"proto": "NFS", "flag": "maybe"}, "parameter 'flag': must be a boolean"),
    ({"proto": "NFS", "extra": "{"}, "parameter 'extra': not valid JSON"),
    ({"proto": "NFS", "nope": "1"}, "parameter 'nope' is not declared"),
])
def test_a_missing_or_invalid_value_names_the_parameter(given, message):
    with pytest.raises(template.TemplateError, match=message):
        template.parse(T, given)


@pytest.mark.parametrize("section, message", [
    ("p: {type: float}", "parameter 'p': type must be one of"),
    ("p: {type: string, secret: true}", "parameter 'p': unknown key 'secret'"),
    ("p: {type: number, constraints: [{range: {least: 1}}]}", "range takes"),
    ("p: {type: string, constraints: [{allowed_pattern: '('}]}", "not a valid pattern"),
    ("p: {type: number, default: 0, constraints: [{range: {min: 1}}]}", "at least 1"),
])
def test_an_invalid_declaration_names_the_parameter(section, message):
    text = f"parameters:\n  {section}\nresources: {{}}\n"
    with pytest.raises(template.TemplateError, match=message):
        template.parse(text, {})


def test_get_param_of_an_undeclared_parameter_or_missing_element_is_refused():
    base = "parameters: {l: {type: comma_delimited_list, default: a}}\nresources:\n"
    res = "  s: {type: share, properties: {size: 1, proto: NFS, name: %s}}\n"
    with pytest.raises(template.TemplateError, match="undeclared parameter 'x'"):
        template.parse(base + res % "{get_param: x}")
    with pytest.raises(template.TemplateError, match="has no element 3"):
        template.parse(base + res % "{get_param: [l, 3]}")


def test_environment_parameters_win_over_parameter_defaults_and_p_parses():
    env = params.read_environment("parameter_defaults: {a: 1, b: 2}\nparameters: {b: 3}\n")
    assert params.given_values([env], {"a", "b"}) == {"a": 1, "b": 3}
    # Heat's parameter_defaults: only for the parameters a template declares
    # (one file serves several templates), and any file's parameter beats
    # any file's default; a later file wins within each.
    later = params.read_environment("parameter_defaults: {b: 4, c: 5}\nparameters: {a: 6}\n")
    assert params.given_values([env, later], {"a", "b"}) == {"a": 6, "b": 3}
    assert params.given_values([env, later], set()) == {"b": 3, "a": 6}
    with pytest.raises(params.ParameterError, match="unknown environment section"):
        params.read_environment("resource_registry: {}\n")
    # Malformed YAML in one line naming where (not PyYAML's dump); a key
    # given twice is refused, as in a template.
    with pytest.raises(params.ParameterError) as bad:
        params.read_environment("parameters:\n  a: [1\n")
    assert str(bad.value).startswith("malformed YAML at line 3") and "\n" not in str(bad.value)
    with pytest.raises(params.ParameterError, match="duplicate key"):
        params.read_environment("parameters: {a: 1, a: 2}\n")
    assert params.parse_assignments(["a=1", "b=x=y", "a=2"]) == {"a": "2", "b": "x=y"}
    with pytest.raises(params.ParameterError, match="expected NAME=VALUE"):
        params.parse_assignments(["novalue"])
