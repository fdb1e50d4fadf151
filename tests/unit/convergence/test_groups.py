"""Resource groups: expansion into members, %index%, references to the group,
the stored form, and one clear message per mistake (convergence/groups.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sharemgr.convergence import groups as grp
from sharemgr.convergence import properties, template

GROUPS = """
parameters:
  n: {type: number, default: 3}
resources:
  base: {type: share_server}
  shares:
    type: resource_group
    properties:
      count: {get_param: n}
      resource_def:
        type: share
        properties: {size: 1, proto: NFS, name: "data-%index%",
                     share_server: {get_resource: base}}
  snaps:
    type: resource_group
    depends_on: base
    properties:
      count: 2
      resource_def:
        type: snapshot
        properties: {share: {get_attr: [shares, resource.%index%, id]}}
  after:
    type: share
    properties: {size: 1, proto: NFS, snapshot: {get_attr: [snaps, refs, 1]}}
    depends_on: [shares]
outputs:
  names: {get_attr: [shares, name]}
  refs: {get_attr: [shares, refs]}
  one: {get_attr: [shares, resource.1, export_locations, 0, path]}
  map: {get_attr: [snaps, refs_map]}
"""


def test_members_replace_the_group_in_its_place():
    tmpl = template.parse(GROUPS)
    assert list(tmpl.resources) == ["base", "shares.0", "shares.1", "shares.2",
                                    "snaps.0", "snaps.1", "after"]
    assert [tmpl.resources[f"shares.{i}"].properties["name"] for i in range(3)] == \
        ["data-0", "data-1", "data-2"]
    assert tmpl.members == {"shares.0": ("shares", 0), "shares.1": ("shares", 1),
                            "shares.2": ("shares", 2), "snaps.0": ("snaps", 0),
                            "snaps.1": ("snaps", 1)}
    assert {g.name: g.count for g in tmpl.groups.values()} == {"shares": 3, "snaps": 2}


def test_dependencies_of_members_and_of_what_references_the_group():
    deps = template.parse(GROUPS).dependencies()
    # A member's properties reference other resources; the group's depends_on is each member's.
    assert deps["shares.1"] == {"base"}
    assert deps["snaps.1"] == {"base", "shares.1"}  # resource.%index%: its own share
    # depends_on the group: every member; refs, 1: that member.
    assert deps["after"] == {"shares.0", "shares.1", "shares.2", "snaps.1"}


def test_attributes_take_heat_shapes():
    tmpl = template.parse(GROUPS)
    assert tmpl.outputs["names"] == [{"get_attr": [f"shares.{i}", "name"]} for i in range(3)]
    assert tmpl.outputs["refs"] == [{"get_resource": f"shares.{i}"} for i in range(3)]
    assert tmpl.outputs["one"] == {"get_attr": ["shares.1", "export_locations", 0, "path"]}
    assert tmpl.outputs["map"] == {"0": {"get_resource": "snaps.0"},
                                   "1": {"get_resource": "snaps.1"}}
    data = {f"shares.{i}": properties.ResourceData(f"shares.{i}", i, f"id-{i}",
                                                   {"name": f"data-{i}"}) for i in range(3)}
    data.update({f"snaps.{i}": properties.ResourceData(f"snaps.{i}", 9, f"s-{i}")
                 for i in range(2)})
    out = properties.resolve_outputs(tmpl, data)
    assert out["names"] == ["data-0", "data-1", "data-2"]
    assert out["refs"] == ["id-0", "id-1", "id-2"]
    assert out["map"] == {"0": "s-0", "1": "s-1"}
    snap1 = properties.resolve_properties(tmpl.resources["snaps.1"], data)
    assert snap1 == {"share": "id-1"}
    assert tmpl.referenced_attributes == {"shares.0": {"id"}, "shares.1": {"id"}}


def test_stored_form_keeps_the_group_and_reads_back_the_same_expansion():
    tmpl = template.parse(GROUPS)
    stored = tmpl.to_dict()
    assert stored["resources"]["shares"] == {  # type: ignore[index]
        "type": "resource_group",
        "properties": {"count": 3, "resource_def": {
            "type": "share", "properties": {"size": 1, "proto": "NFS", "name": "data-%index%",
                                            "share_server": {"get_resource": "base"}}}}}
    assert "shares.0" not in stored["resources"]  # type: ignore[operator]
    again = template.template_from_dict(stored)
    assert again == tmpl and again.to_dict() == stored
    # An empty group is kept too (its members come back when it grows).
    empty = template.parse(_group(0))
    assert empty.resources == {} and "g" in empty.to_dict()["resources"]  # type: ignore[operator]
    assert template.template_from_dict(empty.to_dict()) == empty


def test_scaling_keeps_members_and_their_definitions():
    three, five, two = (template.parse(GROUPS, {"n": n}) for n in (3, 5, 2))
    members = [n for n in five.resources if n.startswith("shares.")]
    assert members == [f"shares.{i}" for i in range(5)]
    # Members left alone keep their definitions (what references the whole
    # group, 'after', depends on other members now).
    for name in ("base", "shares.0", "shares.1", "snaps.0", "snaps.1"):
        assert two.resources[name] == three.resources[name] == five.resources[name]
    assert set(three.resources) - set(two.resources) == {"shares.2"}


def test_deletion_policy_is_passed_on_to_each_member():
    tmpl = template.parse(GROUPS)
    g = tmpl.groups["shares"]
    raw = grp.GroupDefinition(g.name, 2, {**g.resource_def,
                                                   "deletion_policy": "retain"})
    assert raw.member(1)["deletion_policy"] == "retain"
    assert raw.to_dict()["properties"]["resource_def"]["deletion_policy"] == "retain"  # type: ignore[index]


def _group(count: object = 2, rdef: str = "{type: share, properties: {size: 1, proto: NFS}}",
           extra: str = "", outputs: str = "") -> str:
    return (f"resources:\n  g:\n    type: resource_group\n    properties: {{count: {count}, "
            f"resource_def: {rdef}}}\n{extra}" + (f"outputs:\n{outputs}" if outputs else ""))


@pytest.mark.parametrize("text, message", [
    (_group(-1), "group 'g' property 'count': must be an integer from 0 to 1000, got -1"),
    (_group("two"), "group 'g' property 'count': must be an integer"),
    (_group(1001), "from 0 to 1000, got 1001"),
    (_group(2, "{type: disk}"), "group 'g' property 'resource_def': unknown type 'disk'"),
    (_group(2, "{type: share, depends_on: [x]}"), "resource_def': unknown key 'depends_on'"),
    (_group(2, "{type: resource_group}"), "a group of groups is not supported"),
    (_group(2, "{type: share, properties: {size: 0, proto: NFS}}"),
     "group 'g' member 0 property 'size': must be at least 1, got 0"),
    (_group(12, "{type: share, properties: {size: 1, proto: NFS, name: "
             + "x" * 63 + "%index%}}"),
     "group 'g' member 10 property 'name': at most 64 characters"),
    (_group(2, "{type: share, properties: {proto: NFS}}"),
     "group 'g' member 0: missing required property 'size'"),
    (_group(2, extra="  g.1: {type: share_server}\n"),
     "resource 'g.1': the name is reserved for member 1 of group 'g'"),
    (_group(0, extra="  g.7: {type: share_server}\n"),
     "resource 'g.7': the name is reserved for member 7 of group 'g'"),
    (_group(2, extra="  s: {type: snapshot, properties: {share: {get_resource: g}}}\n"),
     "resource 's' property 'share': get_resource names group 'g'"),
    (_group(2, extra="  s: {type: snapshot, properties: {share: {get_attr: [g, id]}}}\n"),
     "resource 's' property 'share': {get_attr: [g, id]} gives one value per member"),
    (_group(2, extra="  s: {type: snapshot, properties: {share: "
               "{get_attr: [g, resource.2, id]}}}\n"),
     "resource 's' property 'share': group 'g' has no member 2 (count 2)"),
    (_group(2, extra="  s: {type: snapshot, properties: {share: {get_resource: g.5}}}\n"),
     "group 'g' has no member 5 (count 2)"),
    (_group(2, outputs="  o: {get_attr: [g, nope]}\n"),
     "output 'o': group 'g' (share members) has no attribute 'nope'"),
    (_group(2, outputs="  o: {get_attr: [g, resource.x, id]}\n"), "is not resource.N"),
    (_group(2, outputs="  o: {get_attr: [g, resource.1]}\n"), "name the member's attribute"),
    (_group(2, outputs="  o: {get_attr: [g, refs, 2]}\n"), "group 'g' has no member 2"),
    (_group(2, outputs="  o: {get_attr: [g, refs, -1]}\n"), "group 'g' has no member -1"),
    (_group(2, extra="    depends_on: [nope]\n"),
     "group 'g': depends_on names unknown resource 'nope'"),
    (_group(2, extra="    deletion_policy: retain\n"),
     "group 'g': unknown key 'deletion_policy' (put it in resource_def)"),
    (_group(2, extra="    depends_on: [s]\n  s: {type: share_server, depends_on: [g]}\n"),
     "dependency cycle: 'g.0' requires 's' requires 'g.0'"),
])
def test_mistakes_get_one_clear_message(text, message):
    with pytest.raises(template.TemplateError) as exc:
        template.parse(text)
    assert message in str(exc.value)


def test_a_long_group_name_is_refused_for_the_members_it_cannot_name():
    name = "g" * 127
    text = _group(10).replace("  g:", f"  {name}:")
    with pytest.raises(template.TemplateError, match="too long for 10 members"):
        template.parse(text)
    assert len(template.parse(_group(10).replace("  g:", f"  {'g' * 126}:")).resources) == 10


@settings(max_examples=60, deadline=None)
@given(counts=st.lists(st.integers(0, 12), min_size=1, max_size=3),
       attr=st.sampled_from(["name", "size", "refs"]))
def test_expansion_round_trips_and_lists_follow_the_count(counts, attr):
    """Any counts: the members are exactly 0..count-1 in order, the stored
    form reads back the same template, and a list attribute has one entry
    per member."""
    parts = ["resources:"]
    for k, c in enumerate(counts):
        parts.append(f"  g{k}:\n    type: resource_group\n    properties:\n"
                     f"      count: {c}\n      resource_def: {{type: share, properties: "
                     f"{{size: 1, proto: NFS, name: 'm%index%-{k}'}}}}")
    parts.append("outputs:\n" + "".join(f"  o{k}: {{get_attr: [g{k}, {attr}]}}\n"
                                        for k in range(len(counts))))
    tmpl = template.parse("\n".join(parts))
    assert list(tmpl.resources) == [f"g{k}.{i}" for k, c in enumerate(counts) for i in range(c)]
    for k, c in enumerate(counts):
        assert len(tmpl.outputs[f"o{k}"]) == c  # type: ignore[arg-type]
        assert [tmpl.resources[f"g{k}.{i}"].properties["name"] for i in range(c)] == \
            [f"m{i}-{k}" for i in range(c)]
    assert template.template_from_dict(tmpl.to_dict()) == tmpl
