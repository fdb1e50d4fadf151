"""The dummy driver's options: where its backend state lives, its knobs
(delays, failures, crash points, gates, fencing, status methods) and what
``get_share_stats`` reports. Registered on each dummy backend's group."""

from __future__ import annotations

from oslo_config import cfg, types
from sharemgr.drivers import base
from sharemgr.drivers.options import method_seconds

dummy_opts = [
    cfg.StrOpt(
        "dummy_state_path",
        sample_default="$state_path/dummy/<backend>",
        help="Folder of the dummy backend's state (objects and call log). "
        "Default: '<state_path>/dummy/<backend group name>'.",
    ),
    method_seconds(
        "dummy_method_delays",
        "Seconds each driver method sleeps before changing the backend, as "
        "'method:seconds,...', e.g. 'create_share:0.5,delete_share:0.2'. A key "
        "'method.prefix' applies only to resources whose name starts with prefix.",
    ),
    cfg.ListOpt(
        "dummy_fail_methods",
        default=[],
        help="Driver methods ('method' or 'method.prefix') that raise a driver "
        "error instead of changing the backend.",
    ),
    cfg.ListOpt(
        "dummy_crash_before",
        default=[],
        help="Driver methods ('method' or 'method.prefix') at which the whole "
        "process exits at once (os._exit(137)) before the backend changes.",
    ),
    cfg.ListOpt(
        "dummy_crash_after",
        default=[],
        help="Driver methods ('method' or 'method.prefix') at which the whole "
        "process exits at once (os._exit(137)) after the backend change is on disk.",
    ),
    cfg.StrOpt(
        "dummy_unreachable_file",
        help="While this file exists, do_setup fails with 'cannot reach array' "
        "and the file's first line, as a driver whose array is not reachable yet "
        "(share-manager retries the set-up with back-off).",
    ),
    cfg.StrOpt(
        "dummy_gate_dir",
        help="Folder of gate files. Before changing the backend, a call waits "
        "while a file '<method>' exists there, or '<method>.<prefix>' where the "
        "resource's name starts with prefix. The call is in the call log before it "
        "waits.",
    ),
    cfg.FloatOpt(
        "dummy_gate_poll_interval",
        default=0.05,
        min=0.001,
        max=10.0,
        help="Seconds between looks at the gate folder while a call waits.",
    ),
    cfg.BoolOpt(
        "dummy_honours_fencing",
        default=True,
        help="Honour fencing tokens (doc/drivers.rst, 'Fencing'): refuse, with "
        "FencedCall and no change, a call whose token is older than one already "
        "accepted for the same object. False: a backend that cannot fence.",
    ),
    cfg.ListOpt(
        "dummy_status_methods",
        item_type=types.String(
            choices=base.STATUS_METHODS + tuple(base.BATCH_STATUS_METHODS.values())),
        default=list(base.STATUS_METHODS) + list(base.BATCH_STATUS_METHODS.values()),
        help="Optional status methods (single and batch) the dummy driver "
        "implements; the others raise NotImplementedError. A batch method "
        "answers only while its single method is enabled too.",
    ),
    # What get_share_stats() reports; the defaults support everything.
    cfg.BoolOpt(
        "dummy_snapshot_support",
        default=True,
        help="Report snapshot_support: false makes intake refuse snapshots of "
        "this backend's shares.",
    ),
    cfg.BoolOpt(
        "dummy_create_share_from_snapshot_support",
        default=True,
        help="Report create_share_from_snapshot_support: false makes intake "
        "refuse shares made from this backend's snapshots.",
    ),
    cfg.StrOpt(
        "dummy_replication_type",
        default="readable",
        choices=("readable", "writable", "dr", "none"),
        help="Report replication_type; 'none' reports None, and intake refuses "
        "replicas on this backend.",
    ),
    cfg.StrOpt(
        "dummy_replication_domain",
        help="Report replication_domain: dummy backends reporting the same one may "
        "hold replicas of each other's shares (they must share one dummy_state_path, "
        "where the active replica is). Unset: replicas stay on the share's backend.",
    ),
    cfg.BoolOpt(
        "dummy_share_group_support",
        default=True,
        help="Report share_group_support: false makes intake refuse share groups "
        "on this backend.",
    ),
    cfg.Opt(
        "dummy_pools",
        type=types.Dict(value_type=types.Integer(min=0)),
        default={},
        help="Pools the backend reports, as 'name:total GiB,...', e.g. "
        "'fast:100,slow:1000'. A pool's free capacity is its total minus the "
        "sizes of the shares and replicas the backend holds in it. Empty (the "
        "default): no pools, unlimited capacity ('infinite'); shares go to the "
        "backend as a whole ('host@backend', no '#pool').",
    ),
]
