"""Stack parameters, outputs and the update preview through sharectl and a
real share-manager (doc/convergence.rst, "Parameters", "Preview"): on SQLite
+ file locks and on PostgreSQL + Redis."""

from __future__ import annotations

import pytest
from sharemgr.db import stacks

from tests.functional.harness import database
from tests.functional.test_stacks import _rows, _setup, _write, embedded, servers  # noqa: F401

pytestmark = pytest.mark.functional

V1 = """
parameters:
  size: {type: number, constraints: [{range: {min: 1, max: 5}}]}
  proto: {type: string, default: NFS, constraints: [{allowed_values: [NFS, CIFS]}]}
  label: {type: string, hidden: true, constraints: [{allowed_pattern: "[a-z]+"}]}
resources:
  data:
    type: share
    properties: {size: {get_param: size}, proto: {get_param: proto}, backend: dummy,
                 name: {get_param: label}}
  snap:
    type: snapshot
    properties: {share: {get_resource: data}}
  logs:
    type: share
    properties: {size: 1, proto: NFS}
  old:
    type: share
    properties: {size: 1, proto: NFS}
outputs:
  data_size: {get_attr: [data, size]}
  label: {get_param: label}
"""
# data: proto (replace, and so its snapshot); logs grows (in place); old
# goes; extra is new.
V2 = V1.replace("""  old:
    type: share
    properties: {size: 1, proto: NFS}""", """  extra:
    type: share
    properties: {size: 1, proto: NFS}""").replace(
    "properties: {size: 1, proto: NFS}\n  extra", "properties: {size: 2, proto: NFS}\n  extra")


def _snapshot(d):
    """Every row of the stack tables: a dry run must leave them as they are."""
    db, _ = database(d)
    try:
        stack = stacks.stack_lookup(db, "web")
        return (stack.template_id, stack.current_traversal, stack.updated_at,
                sorted((r.id, r.name, r.physical_id, r.action, r.status)
                       for r in stacks.resource_list(db, stack.id)))
    finally:
        db.dispose()


@pytest.fixture(params=["embedded", "servers"])
def either(request):
    return request.getfixturevalue(request.param)


def test_parameters_outputs_and_preview(deployment, either):
    d = _setup(deployment, either)
    d.sync()
    d.start()
    v1, v2 = _write(d, "v1", V1), _write(d, "v2", V2)
    env = d.root / "env.yaml"
    # A default for a parameter V1 does not declare (replicas) is ignored, as
    # in Heat: one environment serves several templates.
    env.write_text("parameter_defaults: {size: 4, replicas: 3}\n"
                   "parameters: {size: 9, label: secret}\n")

    # Missing and invalid values: exit 2 naming the parameter, nothing written.
    out = d.sharectl("stack", "create", "web", "-t", v1, check=False)
    assert out.returncode == 2 and "parameter 'size'" in out.stderr, out.stderr
    out = d.sharectl("stack", "create", "web", "-t", v1, "-e", str(env), check=False)
    assert out.returncode == 2 and "parameter 'size': must be at most 5" in out.stderr
    bad_env = d.root / "bad-env.yaml"
    bad_env.write_text("parameters:\n  size: [1\n")
    out = d.sharectl("stack", "create", "web", "-t", v1, "-e", str(bad_env), check=False)
    assert out.returncode == 2 and out.stderr.strip() == (
        f"sharectl: error: invalid environment {bad_env}: malformed YAML at line 3, column 1: "
        "expected ',' or ']', but got '<stream end>'"), out.stderr
    undeclared = d.root / "undeclared-env.yaml"
    undeclared.write_text("parameters: {size: 2, replicas: 3}\n")
    out = d.sharectl("stack", "create", "web", "-t", v1, "-e", str(undeclared), check=False)
    assert out.returncode == 2 and "'replicas' is not declared" in out.stderr, out.stderr
    assert d.json("stack", "list") == []

    # -P wins over -e.
    shown = d.json("stack", "create", "web", "-t", v1, "-e", str(env), "-P", "size=2",
                   "--wait")
    assert shown["status"] == "COMPLETE"
    assert shown["parameters"] == {"size": 2, "proto": "NFS", "label": "******"}
    assert d.json("stack", "output", "list", "web") == [
        {"output_key": "data_size", "output_value": 2},
        {"output_key": "label", "output_value": "secret"}]
    assert d.json("stack", "output", "show", "web", "data_size")["output_value"] == 2
    out = d.sharectl("stack", "output", "show", "web", "nope", check=False)
    assert out.returncode == 2 and "no output 'nope'" in out.stderr

    # The preview: the update keeps size and label (given before), changes proto.
    before = _rows(d, "web")
    unchanged_db = _snapshot(d)
    preview = d.json("stack", "update", "web", "-t", v2, "-P", "proto=CIFS", "--dry-run")
    assert preview == {"data": "replaced (proto)", "snap": "replaced (share)",
                       "logs": "updated (size)", "extra": "added", "old": "deleted"}
    assert _snapshot(d) == unchanged_db

    # Refused without --allow-replace, naming the share and the property.
    out = d.sharectl("stack", "update", "web", "-t", v2, "-P", "proto=CIFS", "--wait",
                     check=False)
    assert out.returncode == 2 and "share 'data' (proto)" in out.stderr, out.stderr
    assert _snapshot(d) == unchanged_db

    shown = d.json("stack", "update", "web", "-t", v2, "-P", "proto=CIFS", "--wait",
                   "--allow-replace")
    assert shown["status"] == "COMPLETE"
    assert shown["parameters"] == {"size": 2, "proto": "CIFS", "label": "******"}
    after = _rows(d, "web")
    did = {
        "added": set(after) - set(before),
        "deleted": set(before) - set(after),
        "replaced": {n for n in set(after) & set(before)
                     if after[n].physical_id != before[n].physical_id},
        "updated": {n for n in set(after) & set(before)
                    if after[n].physical_id == before[n].physical_id
                    and after[n].properties != before[n].properties},
    }
    said = {kind: {n for n, c in preview.items() if c.split(" ")[0] == kind} for kind in did}
    assert did == said


TYPED = """
resources:
  base: {type: share, properties: {size: 1, proto: NFS}}
  x: {type: share, properties: {size: 1, proto: NFS}}
"""
# x becomes a snapshot of base: the share x is deleted, its data lost.
RETYPED = TYPED.replace("x: {type: share, properties: {size: 1, proto: NFS}}",
                        "x: {type: snapshot, properties: {share: {get_resource: base}}}")


def test_a_share_made_another_type_is_refused_without_allow_replace(deployment, either):
    """A share whose type the new template changes is replaced (deleted,
    data and all): the update's guard refuses it as it refuses a property
    that forces a new share. Before, the preview said replaced and the
    update went on and deleted the share."""
    d = _setup(deployment, either)
    d.sync()
    d.start()
    d.sharectl("stack", "create", "web", "-t", _write(d, "typed", TYPED), "--wait")
    retyped = _write(d, "retyped", RETYPED)
    assert d.json("stack", "update", "web", "-t", retyped, "--dry-run")["x"] == \
        "replaced (type): type share -> snapshot"
    unchanged_db = _snapshot(d)
    share_x = _rows(d, "web")["x"].physical_id

    out = d.sharectl("stack", "update", "web", "-t", retyped, "--wait", check=False)
    assert out.returncode == 2 and "share 'x' (type)" in out.stderr, out.stderr
    assert _snapshot(d) == unchanged_db
    assert share_x in {s["id"] for s in d.json("share", "list")}

    shown = d.json("stack", "update", "web", "-t", retyped, "--wait", "--allow-replace")
    assert shown["status"] == "COMPLETE"
    assert _rows(d, "web")["x"].type == "snapshot"
    assert share_x not in {s["id"] for s in d.json("share", "list")}
