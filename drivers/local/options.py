"""Options of a ``local`` backend's config group."""

from __future__ import annotations

from oslo_config import cfg, types

local_opts = [
    cfg.StrOpt(
        "local_state_path",
        sample_default="$state_path/local/<backend>",
        help="Folder of this backend's images, mount points, share records, fencing "
        "tokens and (when the driver runs them) its servers' configuration, pid files "
        "and state. Default: '<state_path>/local/<backend group name>'.",
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
    cfg.StrOpt(
        "local_ganesha_exports_file",
        help="Exports file the driver writes (with local_manage_servers = false). "
        "Default: '<local_state_path>/ganesha/exports.conf'.",
    ),
    cfg.StrOpt(
        "local_ganesha_pid_file",
        help="Pid file of the system's ganesha.nfsd (with local_manage_servers = false). "
        "Default: '<local_state_path>/ganesha/ganesha.pid'.",
    ),
    cfg.StrOpt(
        "local_samba_shares_file",
        help="Shares file the driver writes (with local_manage_servers = false). "
        "Default: '<local_state_path>/samba/shares.conf'.",
    ),
    cfg.StrOpt(
        "local_samba_pid_file",
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
