"""Options of a ``local`` backend's config group."""

from __future__ import annotations

import os

from oslo_config import cfg, types

# What no path the driver writes into ganesha.conf, smb.conf or its bus's
# XML may hold: whitespace (ganesha cannot take it in its %include line) and
# what ends or escapes a value, a line, a block or a section there.
_UNSAFE = frozenset('"\';{}[]=#%$\\,<>&')


def path_problem(value: str) -> str | None:
    """Why ``value`` cannot be one of the driver's paths (None: it can)."""
    if not os.path.isabs(value):
        return ("must be an absolute path (a relative one would depend on the daemon's "
                "working directory)")
    bad = sorted({c for c in value if c.isspace() or c in _UNSAFE})
    if bad:
        return (f"cannot hold {' '.join(repr(c) for c in bad)}: the servers' "
                "configuration files cannot quote it")
    return None


class ServerPath(types.String):
    """An absolute path the servers' configuration files can hold."""

    def __init__(self) -> None:
        super().__init__(type_name="absolute path")

    def __call__(self, value: object) -> str:
        text = super().__call__(value)
        problem = path_problem(text)
        if problem:
            raise ValueError(problem)
        return text


local_opts = [
    cfg.Opt(
        "local_state_path",
        type=ServerPath(),
        sample_default="$state_path/local/<backend>",
        help="Folder of this backend's images, mount points, share records, fencing "
        "tokens and (when the driver runs them) its servers' configuration, pid files "
        "and state. Default: '<state_path>/local/<backend group name>'. An absolute "
        "path without whitespace, quotes or the characters ;{}[]=#%$\\,<>& (the "
        "servers' configuration files cannot hold them), as every path option of "
        "the group; anything else stops the start (exit 2).",
    ),
    cfg.HostAddressOpt(
        "local_export_ip",
        default="127.0.0.1",
        help="Address the servers listen on and export locations name.",
    ),
    cfg.PortOpt(
        "local_nfs_port",
        default=2049,
        help="Port of NFS-Ganesha. Two local backends on one host each run their "
        "own servers: give each its own ports (or addresses).",
    ),
    cfg.PortOpt(
        "local_smb_port",
        default=445,
        help="Port of Samba's smbd.",
    ),
    cfg.BoolOpt(
        "local_manage_servers",
        default=True,
        help="Run this backend's own ganesha.nfsd and smbd, with their files under "
        "local_state_path. False: use servers run by the system, which must include "
        "local_ganesha_exports_file and local_samba_shares_file; the driver rewrites "
        "those files and signals the pids in local_ganesha_pid_file and "
        "local_samba_pid_file to re-read them.",
    ),
    cfg.Opt(
        "local_ganesha_exports_file",
        type=ServerPath(),
        help="Exports file the driver writes (with local_manage_servers = false). "
        "Default: '<local_state_path>/ganesha/exports.conf'.",
    ),
    cfg.Opt(
        "local_ganesha_pid_file",
        type=ServerPath(),
        help="Pid file of the system's ganesha.nfsd (with local_manage_servers = false). "
        "Default: '<local_state_path>/ganesha/ganesha.pid'.",
    ),
    cfg.Opt(
        "local_samba_shares_file",
        type=ServerPath(),
        help="Shares file the driver writes (with local_manage_servers = false). "
        "Default: '<local_state_path>/samba/shares.conf'.",
    ),
    cfg.Opt(
        "local_samba_pid_file",
        type=ServerPath(),
        help="Pid file of the system's smbd (with local_manage_servers = false). "
        "Default: '/run/sharemgr-local/<hash of the state path>/pid/smbd.pid'.",
    ),
    cfg.Opt(
        "local_size_unit_mib",
        type=types.Integer(min=16, max=1024),
        default=1024,
        help="MiB in one unit of share size. 1024 (the default): sizes are GiB, as "
        "everywhere else. Smaller values make small, quick shares for tests and "
        "demonstrations.",
    ),
    cfg.FloatOpt(
        "local_max_over_subscription_ratio",
        default=1.0,
        min=1.0,
        max=100.0,
        help="Reported as max_over_subscription_ratio: images are sparse (thin), and "
        "this says how far the shares' sizes may exceed the free space.",
    ),
]


def list_opts() -> list[tuple[str, list[cfg.Opt]]]:
    """For oslo-config-generator: the options of a local backend group."""
    return [("local", local_opts)]
