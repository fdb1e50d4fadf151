"""The options drivers read: two of [DEFAULT] and those of each backend group.

They live with the drivers so the loader and the conformance kit need nothing
from the manager; ``sharemgr.manager.config`` registers them with the rest.
"""

from __future__ import annotations

import os

from oslo_config import cfg, types


class AbsolutePath(types.String):
    """A path that means the same from any folder the daemon or sharectl is
    started in: a relative ``state_path`` put the database under one and the
    coordination folder (``file://relative/...``: a host name to tooz) at
    the root."""

    def __init__(self) -> None:
        super().__init__(type_name="absolute path")

    def __call__(self, value: object) -> str:
        text = super().__call__(value)
        if not os.path.isabs(text):
            raise ValueError("must be an absolute path (a relative one would depend on the "
                             "folder the daemon or sharectl is started in)")
        return text


def method_seconds(name: str, help: str) -> cfg.Opt:
    """An option of seconds per driver method, written 'method:seconds,...'
    (the dummy's delays, the operations' leases)."""
    return cfg.Opt(name, type=types.Dict(value_type=types.Float(min=0)), default={},
                   help=help)


common_opts = [
    cfg.Opt(
        "state_path",
        type=AbsolutePath(),
        default=os.path.join(os.getcwd(), ".state"),
        sample_default="$PWD/.state",
        help="Folder for the embedded default's state: the SQLite database, the "
        "file coordination backend and the dummy driver's backend.",
    ),
    cfg.ListOpt(
        "enabled_share_backends",
        default=["dummy"],
        help="Backends this manager serves. Each names a config group whose "
        "'share_driver' names the driver (default: the group's own name).",
    ),
]

backend_opts = [
    cfg.StrOpt(
        "share_driver",
        help="Entry point name (namespace 'sharemgr.share_drivers') of this "
        "backend's driver, e.g. 'dummy'. Default: the name of the group.",
    ),
    cfg.BoolOpt(
        "driver_handles_share_servers",
        default=False,
        help="Whether the driver creates share servers (DHSS). Shares on such a "
        "backend need a share server.",
    ),
    cfg.StrOpt(
        "share_backend_name",
        help="Name of the backend as reported to users. Default: the group name.",
    ),
    cfg.IntOpt(
        "reserved_percentage",
        min=0,
        max=100,
        help="Percent of each pool's total capacity kept free: no share is "
        "placed into it. Default: what the driver reports for the pool (0 "
        "when it reports none).",
    ),
    cfg.FloatOpt(
        "max_over_subscription_ratio",
        min=1.0,
        help="For a thin-provisioned pool, how many times its capacity (less "
        "the reserve) may be allocated to shares. Default: what the driver "
        "reports for the pool, else 20.0 as Manila.",
    ),
    cfg.IntOpt(
        "request_workers",
        min=1,
        max=256,
        help="Threads that carry out this backend's requests (its driver calls). "
        "Each backend has its own: a slow or hung backend holds only these, never "
        "another backend's. Default: [DEFAULT] request_workers.",
    ),
]



def register_common_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_opts(common_opts)


def register_backend_opts(conf: cfg.ConfigOpts, backend: str) -> None:
    conf.register_opts(backend_opts, group=backend)
