"""The ``local`` share driver: real NFS and CIFS shares from this host.

Each share is an ext4 filesystem in a sparse image file, loop-mounted under
the backend's state path; NFS-Ganesha exports NFS shares and Samba serves
CIFS ones, each enforcing the share's access rules. Snapshots are frozen
copies of the image. doc/local_driver.rst describes the mapping and limits.

Every call about an object holds that object's file lock and checks its
fencing token first (``fencing``); every value from a request is checked
(``validation``) before it reaches a command line or a configuration file.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path

from oslo_config import cfg
from sharemgr.common import vocab
from sharemgr.drivers import base
from sharemgr.drivers.exceptions import (
    InvalidDriverOption,
    InvalidShareRequest,
    ShareBackendException,
    ShareResourceNotFound,
    ShareShrinkingPossibleDataLoss,
)
from sharemgr.drivers.local import commands, images, manage, reads, records, validation
from sharemgr.drivers.local.exports import Exports
from sharemgr.drivers.local.fencing import FenceStore, file_lock
from sharemgr.drivers.local.ganesha import GaneshaServer
from sharemgr.drivers.local.options import local_opts, path_problem
from sharemgr.drivers.local.records import AVAILABLE, CREATING, DELETING, RESIZING, Records
from sharemgr.drivers.local.samba import SambaServer

LOG = logging.getLogger(__name__)
MIB = 1024 * 1024


class LocalDriver(base.ShareDriver):
    """Shares in loop-mounted ext4 images, exported by NFS-Ganesha and Samba."""

    driver_opts = local_opts
    supported_dhss_modes = (False,)
    honours_fencing = True

    def __init__(self, configuration: cfg.ConfigOpts.GroupAttr, *, backend_name: str, host: str,
                 engine_id: str, state_path: str) -> None:
        super().__init__(configuration, backend_name=backend_name, host=host,
                         engine_id=engine_id, state_path=state_path)
        conf = configuration
        root = conf.local_state_path or os.path.join(state_path, "local", backend_name)
        problem = path_problem(root)
        if problem:  # the option's type checked a value given; this is the default's
            raise InvalidDriverOption(
                f"local_state_path {root!r} (the default, under state_path): {problem}; "
                "set local_state_path")
        self.root = Path(root)
        self.ip = conf.local_export_ip
        self.unit_bytes = int(conf.local_size_unit_mib) * MIB
        self.images = self.root / "images"
        self.snapshots = self.root / "snapshots"
        self.mounts = self.root / "mnt"
        self.records = Records(self.root / "records")
        self.fence = FenceStore(self.root)
        manage = bool(conf.local_manage_servers)
        self.ganesha = GaneshaServer(
            self.root / "ganesha", self.ip, conf.local_nfs_port, manage,
            exports_file=_path(conf.local_ganesha_exports_file),
            pid_file=_path(conf.local_ganesha_pid_file))
        netbios = ("SHM" + "".join(c for c in backend_name.upper() if c.isalnum()))[:15]
        self.samba = SambaServer(
            self.root / "samba", self.ip, conf.local_smb_port, manage, netbios,
            shares_file=_path(conf.local_samba_shares_file),
            pid_file=_path(conf.local_samba_pid_file))
        self.exports = Exports(self.ip, self.records, self.ganesha, self.samba,
                               self.fence.locks, self._mount)

    # Set-up ----------------------------------------------------------------

    def _required_programs(self) -> list[str]:
        programs = list(images.PROGRAMS)
        if self.ganesha.manage:
            programs += ["ganesha.nfsd", "smbd"]
        return programs

    def do_setup(self) -> None:
        if os.geteuid() != 0:
            raise ShareBackendException("local driver: must run as root (it mounts "
                                        "images and runs NFS-Ganesha and Samba)")
        missing = commands.missing(self._required_programs())
        if missing:
            raise ShareBackendException(
                f"local driver: missing programs {', '.join(missing)}: install the Debian "
                "packages nfs-ganesha nfs-ganesha-vfs samba (doc/local_driver.rst)")
        for folder in (self.images, self.snapshots, self.mounts):
            folder.mkdir(parents=True, exist_ok=True)
        self.records.setup()
        self.fence.setup()
        self.ganesha.setup()
        self.samba.setup()
        # After a reboot nothing is mounted and no server runs: bring every
        # share back before the manager asks (ensure_shares checks again).
        self._restore()

    def check_for_setup_error(self) -> None:
        missing = commands.missing(self._required_programs())
        if missing:
            raise ShareBackendException(f"local driver: missing programs {', '.join(missing)}")

    def _restore(self) -> list[str]:
        """Mount every recorded share whose image exists, finish a resize a
        crash cut off, publish the exports and start the servers; returns
        the ids that could not be brought back. Each share under its lock,
        re-read there: another engine may be working on it."""
        failed = []
        for listed in self.records.all("share"):
            oid = listed["id"]
            with file_lock(self.fence.locks / f"{oid}.lock"):
                record = self.records.get(oid)
                if record is None:
                    continue
                image = self._image(oid)
                try:
                    if record.get("state") == RESIZING and image.exists():
                        self._finish_resize(record)
                    if record.get("state") != AVAILABLE:
                        continue
                    if not image.exists():
                        failed.append(oid)
                        continue
                    images.mount(image, self._mount(oid))
                except ShareBackendException as exc:
                    LOG.error("local driver: share %s cannot be brought back: %s", oid, exc)
                    failed.append(oid)
        self.exports.publish()
        return failed

    def _finish_resize(self, record: records.Record) -> None:
        """A resize cut off by a crash (the caller holds the share's lock):
        fit the filesystem to the image (its size before a shrink's
        truncate, after an extend's) and serve the share again."""
        oid = record["id"]
        image = self._image(oid)
        images.unmount(image, self._mount(oid))
        images.resize_offline(image, images.size_of(image))
        record["state"] = AVAILABLE
        record["size"] = self._units(images.size_of(image))
        self.records.put(record)

    # Paths, records and locks ------------------------------------------------

    def _image(self, object_id: str) -> Path:
        return self.images / f"{object_id}.img"

    def _snap_image(self, object_id: str) -> Path:
        return self.snapshots / f"{object_id}.img"

    def _mount(self, object_id: str) -> Path:
        return self.mounts / object_id

    def _bytes(self, size: int) -> int:
        return validation.size(size) * self.unit_bytes

    def _units(self, size_bytes: int) -> int:
        return -(-size_bytes // self.unit_bytes)

    # Shares ---------------------------------------------------------------------

    def _check_share(self, share: base.Share) -> str:
        proto = validation.protocol(share.get("share_proto"))
        validation.size(share.get("size"))
        return proto

    def _destroy(self, object_id: str) -> None:
        """Remove a share's export, mount, loop device, image and record;
        what is already gone is skipped."""
        record = self.records.get(object_id)
        if (record is None and not self._image(object_id).exists()
                and not images.is_mounted(self._mount(object_id))):
            return  # never made, or already deleted
        if record is not None and record.get("state") != DELETING:
            record["state"] = DELETING
            self.records.put(record)
        self.exports.publish()
        images.unmount(self._image(object_id), self._mount(object_id))
        with contextlib.suppress(FileNotFoundError, OSError):
            self._mount(object_id).rmdir()
        images.remove(self._image(object_id))
        self.records.remove(object_id)

    def _make_share(self, share: base.Share, proto: str,
                    fill: Callable[[Path], None]) -> list[base.ExportLocation]:
        """The common path of create_share and create_share_from_snapshot:
        return the existing share, or make it with ``fill(image)`` and
        export it; a failure removes what was made."""
        oid = share["id"]
        record = self.records.get(oid)
        if (record is not None and record.get("state") == AVAILABLE
                and self._image(oid).exists()):
            images.mount(self._image(oid), self._mount(oid))  # a retry after a crash
            self.exports.publish()
            return self.exports.locations(record)
        if record is not None or self._image(oid).exists():
            self._destroy(oid)  # what a crashed create left half made
        record = {"id": oid, "kind": "share", "proto": proto, "size": share["size"],
                  "share_id": share.get("share_id"), "name": share.get("name"),
                  "rules": [], "state": CREATING}
        self.exports.put_new(record)
        try:
            fill(self._image(oid))
            images.mount(self._image(oid), self._mount(oid))
            record["state"] = AVAILABLE
            self.records.put(record)
            self.exports.publish()
        except BaseException:
            with contextlib.suppress(Exception):
                self._destroy(oid)
            raise
        return self.exports.locations(record)

    def create_share(self, share: base.Share, share_server: base.ShareServer | None = None
                     ) -> list[base.ExportLocation]:
        with self.fence.guard(share, "share") as oid:
            proto = self._check_share(share)
            size_bytes = self._bytes(share["size"])
            LOG.info("local driver: creating %s share %s of %d bytes", proto, oid, size_bytes)
            return self._make_share(share, proto,
                                    lambda image: images.create(image, size_bytes))

    def create_share_from_snapshot(self, share: base.Share, snapshot: base.Snapshot,
                                   share_server: base.ShareServer | None = None
                                   ) -> list[base.ExportLocation]:
        with self.fence.guard(share, "share") as oid:
            proto = self._check_share(share)
            snap_id = validation.object_id(snapshot.get("id"), "snapshot id")
            size_bytes = self._bytes(share["size"])

            def fill(image: Path) -> None:
                with file_lock(self.fence.locks / f"{snap_id}.lock"):
                    source = self._snap_image(snap_id)
                    if self.records.get(snap_id) is None or not source.exists():
                        raise ShareResourceNotFound(f"local driver: no snapshot {snap_id}")
                    if images.size_of(source) > size_bytes:
                        raise InvalidShareRequest(
                            f"local driver: share {oid} of size {share['size']} is smaller "
                            f"than snapshot {snap_id}")
                    images.copy(source, image)
                images.new_identity(image)
                if images.size_of(image) < size_bytes:
                    images.resize_offline(image, size_bytes)

            return self._make_share(share, proto, fill)

    def delete_share(self, share: base.Share, share_server: base.ShareServer | None = None) -> None:
        with self.fence.guard(share, "share") as oid:
            LOG.info("local driver: deleting share %s", oid)
            self._destroy(oid)

    def _existing(self, oid: str) -> records.Record:
        record = self.records.get(oid)
        if (record is None or record.get("kind") != "share" or record.get("state") != AVAILABLE
                or not self._image(oid).exists()):
            raise ShareResourceNotFound(f"local driver: no share {oid}")
        return record

    def extend_share(self, share: base.Share, new_size: int,
                     share_server: base.ShareServer | None = None) -> None:
        with self.fence.guard(share, "share") as oid:
            record = self._existing(oid)
            size_bytes = self._bytes(new_size)
            image = self._image(oid)
            if size_bytes < images.size_of(image):
                raise InvalidShareRequest(
                    f"local driver: share {oid} is larger than {new_size}: use shrink")
            try:
                images.grow_online(image, self._mount(oid), size_bytes)  # again is harmless
            except commands.CommandFailed as exc:
                LOG.info("local driver: share %s: online resize refused (%s): offline", oid,
                         exc.last_line)
                self._offline(record, lambda: images.resize_offline(image, size_bytes))
            record["size"] = new_size
            self.records.put(record)
            self.exports.publish()

    def _offline(self, record: records.Record, change: Callable[[], None]) -> None:
        """Run ``change`` with the share unexported and unmounted (a resize
        ext4 cannot do mounted), then mount and export it again."""
        oid = record["id"]
        record["state"] = RESIZING
        self.records.put(record)
        try:
            self.exports.publish()
            images.unmount(self._image(oid), self._mount(oid))
            change()
        finally:
            images.mount(self._image(oid), self._mount(oid))
            record["state"] = AVAILABLE
            self.records.put(record)
            self.exports.publish()

    def shrink_share(self, share: base.Share, new_size: int,
                     share_server: base.ShareServer | None = None) -> None:
        with self.fence.guard(share, "share") as oid:
            record = self._existing(oid)
            size_bytes = self._bytes(new_size)
            image = self._image(oid)
            if size_bytes > images.size_of(image):
                raise InvalidShareRequest(
                    f"local driver: share {oid} is smaller than {new_size}: use extend")
            if size_bytes < images.size_of(image):
                images.mount(image, self._mount(oid))
                used = images.used_bytes(self._mount(oid))
                if used > size_bytes * (1 - images.SHRINK_HEADROOM):
                    raise ShareShrinkingPossibleDataLoss(
                        f"local driver: share {oid} holds {used} bytes of data and "
                        f"metadata; {new_size} ({size_bytes} bytes) would not hold them "
                        "safely: not shrunk")

                def change() -> None:
                    try:
                        images.resize_offline(image, size_bytes)
                    except commands.CommandFailed as exc:
                        raise ShareShrinkingPossibleDataLoss(
                            f"local driver: share {oid} cannot shrink to {new_size}: "
                            f"{exc}") from None

                self._offline(record, change)
            record["size"] = new_size
            self.records.put(record)

    def manage_existing(self, share: base.Share, driver_options: Mapping[str, str]
                        ) -> base.ManagedShare:
        """A share of this backend, found by its export path, renamed to
        ``share["id"]`` (drivers/local/manage.py); unmanage is the base
        class's: the share stays exported as it is."""
        return manage.take_over(self, share, driver_options)

    def migration_data_path(self, share: base.Share,
                            share_server: base.ShareServer | None = None) -> str:
        """The share's mounted filesystem: the engine's data mover reads or
        writes it for a host-assisted migration (doc/migration.rst)."""
        with self.fence.guard(share, "share") as oid:
            self._existing(oid)
            mount_point = self._mount(oid)
            if not images.is_mounted(mount_point):
                raise ShareBackendException(f"local driver: share {oid} is not mounted")
            return str(mount_point)

    # Access ---------------------------------------------------------------------

    def update_access(self, share: base.Share, access_rules: list[base.AccessRule],
                      add_rules: list[base.AccessRule], delete_rules: list[base.AccessRule],
                      share_server: base.ShareServer | None = None
                      ) -> dict[str, base.RuleError] | None:
        with self.fence.guard(share, "share") as oid:
            record = self._existing(oid)
            proto = record["proto"]
            applied: list[validation.CheckedRule] = []
            errors: dict[str, base.RuleError] = {}
            # The full set, every time: add_rules and delete_rules only say
            # what changed, and recovery passes neither. Each rule on its
            # own: a bad one is refused alone, the others are applied.
            for raw in access_rules or []:
                try:
                    applied.append(validation.rule(raw, proto))
                except InvalidShareRequest as exc:
                    LOG.warning("local driver: share %s: rule %s refused: %s", oid,
                                raw.get("id"), exc)
                    errors[str(raw.get("id"))] = {"state": vocab.ACCESS_ERROR, "reason": str(exc)}
            # Together: the newer of two rules the exporter cannot hold
            # beside each other (intake refuses it; two allows at once pass).
            for rule_id, reason in validation.unservable(applied, proto).items():
                errors[rule_id] = {"state": vocab.ACCESS_ERROR, "reason": reason}
                next(r for r in applied if r["id"] == rule_id)["error"] = True
            record["rules"] = applied
            self.records.put(record)
            for rule_id, reason in self.exports.publish().items():
                # The exporter rejected it (and the driver took it out).
                if any(r["id"] == rule_id for r in applied):
                    errors[rule_id] = {"state": vocab.ACCESS_ERROR, "reason": reason}
            return errors or None

    # Snapshots ------------------------------------------------------------------

    def create_snapshot(self, snapshot: base.Snapshot, share_server: base.ShareServer | None = None
                        ) -> base.ModelUpdate | None:
        with self.fence.guard(snapshot, "snapshot") as sid:
            share_id = validation.object_id(snapshot.get("share_instance_id"),
                                            "share instance id")
            existing = self.records.get(sid)
            if existing is not None and self._snap_image(sid).exists():
                return {"status": vocab.AVAILABLE, "size": existing["size"]}
            with file_lock(self.fence.locks / f"{share_id}.lock"):
                record = self._existing(share_id)
                image, mount_point = self._image(share_id), self._mount(share_id)
                snap = {"id": sid, "kind": "snapshot", "share_instance_id": share_id,
                        "size": record["size"], "name": snapshot.get("name")}
                self.records.put({**snap, "state": CREATING})
                try:
                    with images.frozen(mount_point):
                        images.copy(image, self._snap_image(sid))
                    self.records.put({**snap, "state": AVAILABLE})
                except BaseException:
                    with contextlib.suppress(Exception):
                        images.remove(self._snap_image(sid))
                        self.records.remove(sid)
                    raise
            return {"status": vocab.AVAILABLE, "size": record["size"]}

    def delete_snapshot(self, snapshot: base.Snapshot,
                        share_server: base.ShareServer | None = None) -> None:
        with self.fence.guard(snapshot, "snapshot") as sid:
            images.remove(self._snap_image(sid))
            self.records.remove(sid)

    def revert_to_snapshot(self, snapshot: base.Snapshot, share_access_rules: list[base.AccessRule],
                           snapshot_access_rules: list[base.AccessRule],
                           share_server: base.ShareServer | None = None) -> None:
        """A snapshot is a whole copy of the share's image: the share is
        taken offline, its image replaced by a copy of the snapshot's (the
        same filesystem, so the same identity) in one rename, and served
        again. A crash in between leaves the share resizing, which the
        driver's start finishes (``_restore``) with one image or the other."""
        with self.fence.guard(snapshot, "snapshot") as sid:
            share_id = validation.object_id(snapshot.get("share_instance_id"),
                                            "share instance id")
            snap, source = self.records.get(sid), self._snap_image(sid)
            if snap is None or snap.get("state") != AVAILABLE or not source.exists():
                raise ShareResourceNotFound(f"local driver: no snapshot {sid}")
            with file_lock(self.fence.locks / f"{share_id}.lock"):
                # The manager's revert holds the share: its token is the share's.
                share = snapshot.get("share")
                self.fence.check(share_id, share.get("fence_token")
                                 if isinstance(share, dict) else None, "share")
                record = self._existing(share_id)
                LOG.info("local driver: reverting share %s to snapshot %s", share_id, sid)
                self._offline(record, lambda: images.copy(source, self._image(share_id)))
                record["size"] = snap["size"]
                self.records.put(record)

    # Truth from the backend ---------------------------------------------------

    def get_share_status(self, share: base.Share, share_server: base.ShareServer | None = None
                         ) -> base.StatusReport:
        with self.fence.guard(share, "share") as oid:
            # A drift check gives the share's active rules: the clients to
            # serve are theirs (else the record's, what was last applied).
            rules = share.get("access_rules")
            return reads.share_status(self, oid, rules if isinstance(rules, list) else None)

    def get_share_statuses(self, shares: list[tuple[base.Share, base.ShareServer | None]]
                           ) -> dict[str, base.StatusAnswer]:
        return reads.each(self.get_share_status, shares)

    def get_snapshot_status(self, snapshot: base.Snapshot,
                            share_server: base.ShareServer | None = None
                            ) -> base.StatusReport:
        with self.fence.guard(snapshot, "snapshot") as sid:
            record = self.records.get(sid)
            if (record is None or record.get("kind") != "snapshot"
                    or not self._snap_image(sid).exists() or record.get("state") != AVAILABLE):
                raise ShareResourceNotFound(f"local driver: no snapshot {sid}")
            return {"status": vocab.AVAILABLE, "size": record["size"]}

    def get_snapshot_statuses(
            self, snapshots: list[tuple[base.Snapshot, base.ShareServer | None]]
                              ) -> dict[str, base.StatusAnswer]:
        return reads.each(self.get_snapshot_status, snapshots)

    def list_shares(self) -> list[base.ListedShare]:
        return reads.listed(self)

    def ensure_shares(self, shares: list[base.Share]) -> dict[str, base.ShareUpdate]:
        return reads.ensured(self, shares)

    def get_backend_info(self) -> base.JSONDict:
        return {}  # always run ensure_shares: a reboot does not change the config

    def get_share_stats(self, refresh: bool = False) -> base.ShareStats:
        return reads.stats(self)


def _path(value: str | None) -> Path | None:
    return Path(value) if value else None

