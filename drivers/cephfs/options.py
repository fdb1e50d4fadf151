"""Options of a ``cephfs`` backend's config group (Manila's names where
Manila's CephFS driver has the option)."""

from __future__ import annotations

from oslo_config import cfg, types

cephfs_opts = [
    cfg.StrOpt(
        "cephfs_conf_path",
        default="/etc/ceph/ceph.conf",
        help="The cluster's ceph.conf: where its monitors are and, by its 'keyring' "
        "setting, where the key of cephfs_auth_id is.",
    ),
    cfg.StrOpt(
        "cephfs_cluster_name",
        default="ceph",
        help="The cluster's name (the ceph CLI's --cluster).",
    ),
    cfg.StrOpt(
        "cephfs_auth_id",
        default="manila",
        help="The cephx id the driver acts as (client.<id>); its capabilities are in "
        "doc/cephfs_driver.rst.",
    ),
    cfg.StrOpt(
        "cephfs_filesystem_name",
        help="The CephFS volume (file system) shares are made in. Default: the "
        "cluster's only one (the start fails when there are several).",
    ),
    cfg.StrOpt(
        "cephfs_subvolume_group",
        help="The subvolume group of this backend's shares; two backends can share one "
        "file system with a group each. Default: 'sharemgr_<backend group name>'. "
        "Every engine serving the backend must use the same.",
    ),
    cfg.Opt(
        "cephfs_volume_mode",
        type=types.String(regex=r"^0?[0-7]{3}$", type_name="octal mode"),
        default="755",
        help="Mode of a new share's root folder (octal).",
    ),
    cfg.StrOpt(
        "cephfs_protocol_helper_type",
        default="CEPHFS",
        choices=[("CEPHFS", "native CephFS: clients mount with a cephx id and key"),
                 ("NFS", "NFS through NFS-Ganesha with FSAL CEPH: clients by ip rules")],
        help="How clients reach the shares.",
    ),
    cfg.HostAddressOpt(
        "cephfs_ganesha_server_ip",
        help="NFS: the address of the NFS-Ganesha server (the one the driver runs binds "
        "it). Required with cephfs_protocol_helper_type = NFS.",
    ),
    cfg.ListOpt(
        "cephfs_ganesha_export_ips",
        default=[],
        item_type=types.HostAddress(),
        help="NFS: the addresses export locations name (several NFS-Ganesha servers "
        "reading the same exports). Default: cephfs_ganesha_server_ip.",
    ),
    cfg.PortOpt(
        "cephfs_ganesha_nfs_port",
        default=2049,
        help="NFS: the port the NFS-Ganesha server the driver runs listens on.",
    ),
    cfg.BoolOpt(
        "cephfs_ganesha_manage_server",
        default=True,
        help="NFS: True: the driver runs an NFS-Ganesha of this host (files under the "
        "engine's state path) that reads the exports from the cluster. False: an existing "
        "NFS-Ganesha does, configured as doc/cephfs_driver.rst ('NFS') says.",
    ),
    cfg.FloatOpt(
        "cephfs_max_over_subscription_ratio",
        default=20.0,
        min=1.0,
        max=1000.0,
        help="Reported as max_over_subscription_ratio (Manila's default): a quota takes "
        "no room until data is written, so the shares' sizes may exceed the free space "
        "this many times.",
    ),
    cfg.StrOpt(
        "cephfs_python",
        default="/usr/bin/python3",
        help="The Python that has the cluster's librados bindings (Debian's python3-rados "
        "loads only into Debian's own Python): the driver runs its bridge to the cluster "
        "with it.",
    ),
    cfg.FloatOpt(
        "cephfs_command_timeout",
        default=30.0,
        min=1.0,
        max=600.0,
        help="Seconds a call to the cluster may take (mgr 'fs' commands block while no "
        "MDS is active); a call that takes longer fails.",
    ),
    cfg.IntOpt(
        "cephfs_fence_lock_seconds",
        default=60,
        min=5,
        max=3600,
        help="How long a call's fencing lock in the cluster lasts unless renewed (it is "
        "renewed every third of it while the call runs): a take-over waits at most this "
        "long after an engine stopped, and an engine stopped inside a call for longer "
        "than this is the window fencing leaves (doc/cephfs_driver.rst, 'Fencing').",
    ),
]


def list_opts() -> list[tuple[str, list[cfg.Opt]]]:
    """For oslo-config-generator: the options of a cephfs backend group."""
    return [("cephfs", cephfs_opts)]
