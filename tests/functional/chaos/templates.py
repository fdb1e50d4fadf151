"""Templates: random small stacks and random changes to them (every one
valid input: test_chaos.py checks). A share's size is now and then a
parameter (``get_param``), its value the parameter's default or, for a
stack whose values are given explicitly, a ``-P`` (``explicit_values``).
Shares named ``keep<N>`` carry ``deletion_policy: retain``."""

from __future__ import annotations

import copy
import random


def _refs(value: object) -> list[str]:
    if isinstance(value, dict):
        if "get_resource" in value:
            return [value["get_resource"]]
        return [r for v in value.values() for r in _refs(v)]
    if isinstance(value, list):
        return [r for v in value for r in _refs(v)]
    return []


def template_refs(res: dict) -> set[str]:
    """Names a resource definition refers to (properties and depends_on)."""
    return set(_refs(res.get("properties", {}))) | set(res.get("depends_on", []))


def _fresh_name(rng: random.Random, resources: dict, prefix: str) -> str:
    while True:
        name = f"{prefix}{rng.randint(1, 99)}"
        if name not in resources:
            return name


def _word(rng: random.Random) -> str:
    return rng.choice(("alpha", "beta", "gamma", "delta", "omega", "main", "blue", "red"))


def _param_of(props: dict) -> str | None:
    size = props.get("size")
    return size["get_param"] if isinstance(size, dict) and "get_param" in size else None


def add_resource(rng: random.Random, resources: dict, params: dict | None = None) -> None:
    shares = [n for n, r in resources.items() if r["type"] == "share"]
    snaps = [n for n, r in resources.items() if r["type"] == "snapshot"]
    kinds = [("share", 4.0), ("group", 1.0)]
    if shares:
        kinds += [("snapshot", 3.0), ("replica", 1.5)]
    if snaps:
        kinds.append(("copy", 2.0))
    kind = rng.choices([k for k, _ in kinds], [w for _, w in kinds])[0]
    res: dict  # a template's resource, as YAML gives it
    if kind == "share" and rng.random() < 0.2:
        # Kept when the stack or the resource goes (and its old share when
        # replaced): the checker lets a "keep" share outlive its stack.
        name = _fresh_name(rng, resources, "keep")
        res = {"type": "share", "deletion_policy": "retain",
               "properties": {"size": rng.randint(1, 3), "proto": rng.choice(("NFS", "CIFS"))}}
    elif kind == "share":
        name = _fresh_name(rng, resources, "data")
        props: dict[str, object] = {"size": rng.randint(1, 3), "proto": rng.choice(("NFS", "CIFS"))}
        if params is not None and rng.random() < 0.3:
            param = f"size_{name}"
            params[param] = {"type": "number", "default": props["size"],
                             "constraints": [{"range": {"min": 1, "max": 4}}]}
            props["size"] = {"get_param": param}
        if rng.random() < 0.3:
            props["backend"] = "dummy"
        res = {"type": "share", "properties": props}
        if resources and rng.random() < 0.3:
            res["depends_on"] = [rng.choice(sorted(resources))]
    elif kind == "copy":
        # A share made from a snapshot: 4 GiB, never smaller than the snapshot
        # (originals stay within 1-3 GiB, a copy's snapshot is at most 4).
        name = _fresh_name(rng, resources, "copy")
        props = {"size": 4, "proto": rng.choice(("NFS", "CIFS")),
                 "snapshot": {"get_resource": rng.choice(snaps)}}
        res = {"type": "share", "properties": props}
    elif kind == "group":
        # Alike shares; nothing references a member, so the checker's
        # reference checks stay those of plain resources.
        name = _fresh_name(rng, resources, "grp")
        member: dict[str, object] = {"size": rng.randint(1, 3),
                                     "proto": rng.choice(("NFS", "CIFS"))}
        if rng.random() < 0.5:
            member["name"] = f"{_word(rng)}-%index%"
        res = {"type": "resource_group",
               "properties": {"count": rng.randint(0, 3),
                              "resource_def": {"type": "share", "properties": member}}}
    elif kind == "snapshot":
        name = _fresh_name(rng, resources, "snap")
        res = {"type": "snapshot", "properties": {"share": {"get_resource": rng.choice(shares)}}}
    else:
        name = _fresh_name(rng, resources, "rep")
        res = {"type": "replica", "properties": {"share": {"get_resource": rng.choice(shares)}}}
    if res["type"] in ("share", "snapshot") and rng.random() < 0.25:
        res["properties"]["name"] = _word(rng)
    resources[name] = res


def random_template(rng: random.Random) -> dict:
    resources: dict[str, object] = {}
    params: dict[str, object] = {}
    for _ in range(rng.randint(1, 5)):
        add_resource(rng, resources, params)
    return {"parameters": params, "resources": resources} if params else {"resources": resources}


def explicit_values(template: dict) -> tuple[dict, dict[str, str]]:
    """The template with every parameter's default put to 1, and the values
    (the generated defaults) to give with ``-P``: the stored sizes then come
    from the values given, not from the defaults."""
    t = copy.deepcopy(template)
    values = {}
    for name, decl in (t.get("parameters") or {}).items():
        values[name] = str(decl["default"])
        decl["default"] = 1
    return t, values


def mutate_template(rng: random.Random, template: dict) -> dict:
    """One or two changes: resize or rename (in place), change protocol
    (replace), scale a group, add or remove a resource."""
    t = copy.deepcopy(template)
    res = t["resources"]
    params = t.setdefault("parameters", {})
    for _ in range(rng.choice((1, 1, 2))):
        originals = [n for n, r in res.items()
                     if r["type"] == "share" and "snapshot" not in r["properties"]]
        shares = [n for n, r in res.items() if r["type"] == "share"]
        named = [n for n, r in res.items() if r["type"] in ("share", "snapshot")]
        groups = [n for n, r in res.items() if r["type"] == "resource_group"]
        referenced = {ref for r in res.values() for ref in template_refs(r)}
        leaves = [n for n in res if n not in referenced]
        choices = []
        if originals:
            choices.append(("resize", 4))
        if named:
            choices.append(("rename", 2))
        if shares:
            choices.append(("proto", 2))
        if groups:
            choices.append(("scale", 2))
        if len(res) < 5:
            choices.append(("add", 2))
        if len(res) > 1 and leaves:
            choices.append(("remove", 2))
        what = rng.choices([c for c, _ in choices], [w for _, w in choices])[0]
        if what == "resize":
            props = res[rng.choice(originals)]["properties"]
            param = _param_of(props)
            if param:  # a new default: the value to use
                decl = params[param]
                decl["default"] = rng.choice([s for s in (1, 2, 3) if s != decl["default"]])
            else:
                props["size"] = rng.choice([s for s in (1, 2, 3) if s != props["size"]])
        elif what == "rename":
            props = res[rng.choice(named)]["properties"]
            props["name"] = rng.choice([w for w in ("alpha", "beta", "gamma", "delta", "omega")
                                        if w != props.get("name")])
        elif what == "proto":
            props = res[rng.choice(shares)]["properties"]
            props["proto"] = "CIFS" if props["proto"] == "NFS" else "NFS"
        elif what == "scale":
            props = res[rng.choice(groups)]["properties"]
            props["count"] = rng.choice([c for c in range(5) if c != props["count"]])
        elif what == "add":
            add_resource(rng, res, params)
        else:
            gone = res.pop(rng.choice(leaves))
            params.pop(_param_of(gone["properties"]) or "", None)
    if not params:
        del t["parameters"]
    return t
