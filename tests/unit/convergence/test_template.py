"""Stack templates: parsing, validation (one clear message), resolution, diffs."""

from __future__ import annotations

import json

import pytest
from sharemgr.convergence import physical, properties, template

EXAMPLE = """
resources:
  data:
    type: share
    properties: {size: 10, proto: NFS, backend: dummy}
  snap:
    type: snapshot
    properties: {share: {get_resource: data}}
  copy:
    type: share
    properties: {size: 10, proto: NFS, snapshot: {get_resource: snap}}
    depends_on: [other]
  other:
    type: share_server
outputs:
  export: {get_attr: [data, export_locations]}
"""


def test_architecture_example_parses():
    tmpl = template.parse(EXAMPLE)
    assert list(tmpl.resources) == ["data", "snap", "copy", "other"]
    assert tmpl.dependencies() == {
        "data": frozenset(),
        "snap": frozenset({"data"}),
        "copy": frozenset({"snap", "other"}),
        "other": frozenset(),
    }
    order = tmpl.dependency_order()
    assert order.index("data") < order.index("snap") < order.index("copy")
    assert order.index("other") < order.index("copy")
    assert tmpl.outputs == {"export": {"get_attr": ["data", "export_locations"]}}


def test_round_trip_through_the_stored_form():
    tmpl = template.parse(EXAMPLE)
    again = template.template_from_dict(tmpl.to_dict())
    assert again == tmpl
    assert template.template_from_dict(template.Template.empty().to_dict()).resources == {}


def test_every_type_of_the_table_is_usable():
    tmpl = template.parse(
        """
resources:
  srv: {type: share_server, properties: {backend: b}}
  grp: {type: share_group, properties: {name: g, backend: b}}
  sh:
    type: share
    properties:
      size: 1
      proto: cephfs
      name: n
      share_server: {get_resource: srv}
      share_group: {get_resource: grp}
  rep: {type: replica, properties: {share: {get_resource: sh}}}
  gs: {type: group_snapshot, properties: {share_group: {get_resource: grp}, name: x}}
"""
    )
    assert tmpl.resources["sh"].requires == {"srv", "grp"}
    # Every reference property names types that exist.
    for rt in template.RESOURCE_TYPES.values():
        for ps in rt.properties.values():
            assert all(t in template.RESOURCE_TYPES for t in ps.ref_types)
            assert ps.update in (template.IN_PLACE, template.REPLACE)


def test_heat_style_outputs_and_single_depends_on():
    tmpl = template.parse(
        """
resources:
  a: {type: share_server}
  b: {type: share_group, depends_on: a}
outputs:
  o: {value: {get_resource: a}, description: the server}
"""
    )
    assert tmpl.resources["b"].depends_on == ("a",)
    assert tmpl.outputs == {"o": {"get_resource": "a"}}


@pytest.mark.parametrize(
    "text, words",
    [
        ("resources: [", ["malformed YAML", "line 1"]),
        # A get_param with no parameters declared names the parameter (it
        # was left a literal, "must be an integer, got {'get_param': …}").
        ("resources: {a: {type: share, properties: {size: {get_param: sz}, proto: NFS}}}",
         ["resource 'a'", "undeclared parameter 'sz'"]),
        ("resources: {a: {type: share, properties: {size: 1, proto: NFS}}}\n"
         "outputs: {o: {get_param: zz}}", ["output 'o'", "undeclared parameter 'zz'"]),
        # A function this language lacks, or misspelt, is said to be one.
        ("resources: {b: {type: share, properties: {size: 1, proto: NFS}},\n"
         "  a: {type: share, properties: {size: 1, proto: NFS, name: {get_resourse: b}}}}",
         ["resource 'a' property 'name'", "unknown function 'get_resourse'"]),
        ("resources: {a: {type: share, properties: {size: 1, proto: NFS,\n"
         "  name: {list_join: [',', [x]]}}}}", ["property 'name'", "unknown function 'list_join'"]),
        ("resources: {a: {type: share, properties: {size: 1, proto: NFS}}}\n"
         "outputs: {z: {get_resourse: a}}", ["output 'z'", "unknown function 'get_resourse'"]),
        ("resources: {a: {type: share, properties: {size: 1, proto: NFS}}}\n"
         "outputs: {q: {value: [{str_replace: {}}]}}", ["output 'q'", "'str_replace'"]),
        ("- a\n- b\n", ["mapping"]),
        ("resources: {}\nconditions: {}\n", ["conditions"]),
        ("resources: {a: {type: volume}}", ["'a'", "unknown type 'volume'"]),
        ("resources: {a: [1]}", ["'a'", "mapping"]),
        ("resources: {a: {type: share, propertys: {}}}", ["'a'", "propertys"]),
        ("resources: {a: {type: share, properties: {size: 1}}}", ["'a'", "missing", "'proto'"]),
        (
            "resources: {a: {type: share, properties: {size: 1, proto: NFS, colour: red}}}",
            ["'a'", "'colour'", "unknown property"],
        ),
        (
            "resources: {a: {type: share, properties: {size: '10', proto: NFS}}}",
            ["'a'", "'size'", "integer"],
        ),
        (
            "resources: {a: {type: share, properties: {size: true, proto: NFS}}}",
            ["'a'", "'size'", "integer"],
        ),
        (
            "resources: {a: {type: share, properties: {size: 0, proto: NFS}}}",
            ["'a'", "'size'", "at least 1"],
        ),
        (
            "resources: {a: {type: share, properties: {size: 99999999999999999999, proto: NFS}}}",
            ["'a'", "'size'", "at most 2147483647"],
        ),
        (
            "resources: {a: {type: share, properties: {size: 1, proto: NFS, name: %s}}}"
            % ("n" * 65),
            ["'a'", "'name'", "at most 64 characters"],
        ),
        ("timeout: -1\nresources: {}", ["'timeout'", "minutes"]),
        ("timeout: soon\nresources: {}", ["'timeout'", "minutes"]),
        (
            "resources: {a: {type: share, properties: {size: 1, proto: XFS}}}",
            ["'a'", "'proto'", "NFS"],
        ),
        (
            "resources: {a: {type: share, properties: {size: 1, proto: NFS, name: 5}}}",
            ["'a'", "'name'", "string"],
        ),
        (
            "resources: {a: {type: snapshot, properties: {share: {get_resource: nope}}}}",
            ["'a'", "'share'", "unknown resource 'nope'"],
        ),
        (
            "resources: {a: {type: share_server, depends_on: [nope]}}",
            ["'a'", "unknown resource 'nope'"],
        ),
        (
            "resources: {a: {type: share_server}, b: {type: snapshot, "
            "properties: {share: {get_resource: a}}}}",
            ["'b'", "'share'", "must reference a share", "share_server"],
        ),
        (
            "resources: {a: {type: share, properties: {size: 1, proto: NFS}}, "
            "b: {type: share, properties: {size: {get_attr: [a, colour]}, proto: NFS}}}",
            ["'b'", "'size'", "no attribute 'colour'"],
        ),
        (
            "resources: {a: {type: share, properties: {size: 1, proto: NFS}}, "
            "b: {type: share, properties: {size: 1, proto: {get_resource: a}}}}",
            ["'b'", "'proto'", "get_resource"],
        ),
        (
            "resources: {a: {type: share_server}}\noutputs: {o: {get_attr: [zz, id]}}",
            ["output 'o'", "unknown resource 'zz'"],
        ),
        ("resources: {a: {type: share_server, depends_on: [a]}}", ["'a'", "itself"]),
        ("resources: {a: {type: share_server}, a: {type: share_group}}", ["duplicate key 'a'"]),
        ("resources: {'a b': {type: share_server}}", ["'a b'", "invalid"]),
    ],
)
def test_invalid_templates_raise_one_clear_error(text, words):
    with pytest.raises(template.TemplateError) as info:
        template.parse(text)
    message = str(info.value)
    for word in words:
        assert word in message, message


def test_cycle_names_the_resources():
    text = """
resources:
  a: {type: share, properties: {size: 1, proto: NFS, snapshot: {get_resource: s}}}
  s: {type: snapshot, properties: {share: {get_resource: b}}}
  b: {type: share, properties: {size: 1, proto: NFS}, depends_on: [a]}
  free: {type: share_server}
"""
    with pytest.raises(template.TemplateError) as info:
        template.parse(text)
    message = str(info.value)
    assert "cycle" in message
    for name in ("'a'", "'s'", "'b'"):
        assert name in message
    assert "'free'" not in message


def test_property_may_reference_a_later_resource():
    tmpl = template.parse(
        "resources: {s: {type: snapshot, properties: {share: {get_resource: d}}}, "
        "d: {type: share, properties: {size: 1, proto: NFS}}}"
    )
    assert tmpl.dependency_order() == ["d", "s"]


# Resolution -----------------------------------------------------------------


def _data(**kw):
    return {
        "data": properties.ResourceData("data", 1, "phys-data", {"size": 10, "export_locations": [
            {"path": "10.0.0.1:/data", "preferred": True}]}),
        "snap": properties.ResourceData("snap", 2, "phys-snap", {}),
        **kw,
    }


def test_resolve_properties_and_outputs():
    tmpl = template.parse(
        """
resources:
  data: {type: share, properties: {size: 10, proto: nfs}}
  snap: {type: snapshot, properties: {share: {get_resource: data}}}
  copy:
    type: share
    properties: {size: {get_attr: [data, size]}, proto: NFS, snapshot: {get_resource: snap}}
outputs:
  path: {get_attr: [data, export_locations, 0, path]}
  all: [{get_resource: data}, {get_attr: [snap, id]}]
"""
    )
    assert properties.resolve_properties(tmpl.resources["data"], {}) == {"size": 10, "proto": "NFS"}
    assert properties.resolve_properties(tmpl.resources["copy"], _data()) == {
        "size": 10, "proto": "NFS", "snapshot": "phys-snap"}
    assert properties.resolve_outputs(tmpl, _data()) == {
        "path": "10.0.0.1:/data", "all": ["phys-data", "phys-snap"]}
    # An output whose resource is missing is None; the others still resolve.
    assert properties.resolve_outputs(tmpl, {"data": _data()["data"]})["all"] is None


def test_resolution_errors():
    tmpl = template.parse(
        """
resources:
  data: {type: share, properties: {size: 1, proto: NFS}}
  copy: {type: share, properties: {size: {get_attr: [data, status]}, proto: NFS}}
  snap: {type: snapshot, properties: {share: {get_resource: data}}}
"""
    )
    with pytest.raises(template.ResolutionError, match="no data for resource 'data'"):
        properties.resolve_properties(tmpl.resources["snap"], {})
    with pytest.raises(template.ResolutionError, match="no physical id"):
        properties.resolve_properties(tmpl.resources["snap"],
                                      {"data": properties.ResourceData("data")})
    bad = {"data": properties.ResourceData("data", 1, "p", {"status": "available"})}
    with pytest.raises(template.ResolutionError, match="'copy' property 'size'.*integer"):
        properties.resolve_properties(tmpl.resources["copy"], bad)


def test_data_by_name_reads_sync_point_input_data():
    rd = properties.ResourceData("data", 7, "phys", {"size": 3})
    input_data = {"7:update": rd.to_dict(), "9:cleanup": None}
    assert properties.data_by_name(input_data) == {"data": rd}


# Updates ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "old, new, changed, replace, in_place",
    [
        ({"size": 1, "proto": "NFS"}, {"size": 1, "proto": "NFS"}, set(), False, {}),
        ({"size": 1, "proto": "NFS"}, {"size": 2, "proto": "NFS"}, {"size"}, False, {"size": 2}),
        ({"size": 5, "proto": "NFS"}, {"size": 2, "proto": "NFS"}, {"size"}, False, {"size": 2}),
        ({"size": 1, "proto": "NFS"}, {"size": 1, "proto": "NFS", "name": "x"}, {"name"}, False,
         {"name": "x"}),
        ({"size": 1, "proto": "NFS"}, {"size": 1, "proto": "CIFS"}, {"proto"}, True, {}),
        ({"size": 1, "proto": "NFS", "backend": "a"}, {"size": 2, "proto": "NFS"},
         {"size", "backend"}, True, {"size": 2}),
    ],
)
def test_diff_share_properties(old, new, changed, replace, in_place):
    diff = properties.diff_properties("share", old, new)
    assert diff.changed == changed
    assert diff.replace is replace
    assert dict(diff.in_place) == in_place
    assert diff.unchanged is (not changed)


def test_diff_other_types():
    assert properties.diff_properties("snapshot", {"share": "a"}, {"share": "b"}).replace
    assert not properties.diff_properties("snapshot", {"share": "a"}, {"share": "a",
                                                                     "name": "n"}).replace
    assert properties.diff_properties("replica", {"share": "a"}, {"share": "b"}).replace
    assert properties.diff_properties("share_group", {"backend": "a"}, {"backend": "b"}).replace


def test_physical_name():
    assert physical.new_name("web", "data", {"name": "abcd"}) == "web-data-abcd"
    name = physical.new_name("web", "data", {})
    assert name.startswith("web-data-") and len(name) > len("web-data-")
    assert physical.new_name("web", "data", {"name": None}) != name


@pytest.mark.parametrize("name", ["", "1web", "w" * 61, "web/1", "web stack"])
def test_stack_names_that_cannot_name_physical_resources(name):
    with pytest.raises(template.TemplateError, match="stack name"):
        template.check_stack_name(name)


def test_longest_names_fit_a_share_name():
    template.check_stack_name("w" * 60)
    name = physical.new_name("w" * 60, "r" * 128, {"name": "n" * template.NAME_PROPERTY_MAX})
    assert len(name) <= 255


def test_referenced_attributes_are_what_get_attr_reads():
    t = template.parse("""
resources:
  a: {type: share, properties: {size: 1, proto: NFS}}
  b: {type: share, properties: {size: 1, proto: NFS, name: {get_attr: [a, name]}}}
  c: {type: snapshot, properties: {share: {get_resource: a}, name: {get_attr: [b, host]}}}
  d: {type: share, properties: {size: 1, proto: NFS,
      name: {get_attr: [a, export_locations, 0, path]}}}
outputs:
  size: {get_attr: [d, size]}
""")
    # Outputs are resolved from the rows, not from SyncPoint data.
    assert t.referenced_attributes == {"a": {"name", "export_locations"}, "b": {"host"}}
    data = properties.ResourceData("a", 1, "p", {"name": "n", "size": 1, "host": "h"})
    assert data.passed_on(t) == {"name": "a", "resource_id": 1, "physical_id": "p",
                                 "attributes": {"name": "n"}}
    assert data.passed_on(None)["attributes"] == dict(data.attributes)


def test_output_resources_are_those_the_outputs_read():
    tmpl = template.parse("""
resources:
  a: {type: share, properties: {size: 1, proto: NFS}}
  b: {type: share, properties: {size: 1, proto: NFS}}
  c: {type: snapshot, properties: {share: {get_resource: a}}}
outputs:
  path: {get_attr: [a, export_locations, 0, path]}
  ids: [{get_resource: c}, plain]
""")
    assert tmpl.output_resources == {"a", "c"}
    assert template.parse("resources: {a: {type: share, properties: {size: 1, proto: NFS}}}"
                          ).output_resources == frozenset()


@pytest.mark.parametrize("text", ["", "\n", "# nothing yet\n"])
def test_an_empty_template_is_refused(text):
    """An empty file is a mistake (the wrong file, a file not yet written):
    refused, as Heat refuses it, where it made a stack of nothing; a stack
    of nothing says so (``resources: {}``)."""
    with pytest.raises(template.TemplateError, match="the template is empty"):
        template.parse(text)
    assert template.parse("resources: {}\n").resources == {}


def test_a_stored_template_with_an_output_calling_an_unknown_function_still_loads():
    """Outputs were not checked for unknown functions before: a stack whose
    stored template has one must still load (every traversal of it would
    fail), its output shown as written; a new template is refused."""
    stored = {"resources": {"a": {"type": "share", "properties": {"size": 1, "proto": "NFS"}}},
              "outputs": {"q": {"list_join": [",", ["x"]]}, "p": {"get_param": "zz"}}}
    assert template.template_from_dict(stored).outputs == stored["outputs"]
    with pytest.raises(template.TemplateError, match="unknown function 'list_join'"):
        template.parse(json.dumps(stored))
