"""Share storage: one ext4 filesystem per share in a sparse image file,
loop-mounted. The image's size is the share's hard size: a write past it
fails with ENOSPC."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

from sharemgr.drivers.local import commands

# Room ext4 needs beyond the data when shrinking (journal, metadata, the
# blocks resize2fs needs to move): refuse a shrink that leaves less.
SHRINK_HEADROOM = 0.10
PROGRAMS = ("truncate", "mkfs.ext4", "mount", "umount", "losetup", "resize2fs", "e2fsck",
            "tune2fs", "fsfreeze", "cp")


def create(image: Path, size_bytes: int) -> None:
    """A sparse file of ``size_bytes`` holding a fresh ext4 filesystem."""
    commands.run(["truncate", "-s", str(size_bytes), str(image)])
    # No reserved blocks: the share's size is all the user's. Lazy init and
    # no discard keep mkfs of a large sparse image quick.
    commands.run(["mkfs.ext4", "-q", "-F", "-m", "0", "-E",
                  "nodiscard,lazy_itable_init=1,lazy_journal_init=1", str(image)])


def is_mounted(mount_point: Path) -> bool:
    return os.path.ismount(mount_point)


def mount(image: Path, mount_point: Path) -> None:
    """Loop-mount ``image`` (a no-op when it is mounted); the loop device is
    detached by the kernel at unmount (autoclear)."""
    mount_point.mkdir(parents=True, exist_ok=True)
    if is_mounted(mount_point):
        return
    commands.run(["mount", "-t", "ext4", "-o", "loop,nodev,nosuid", str(image),
                  str(mount_point)])
    # Anyone the exporter lets in may write at the top (guests on CIFS run
    # as 'nobody'): the rules decide who, not the mode bits.
    os.chmod(mount_point, 0o1777)


def loop_devices(image: Path) -> list[str]:
    out = commands.run(["losetup", "-n", "-O", "NAME", "-j", str(image)], check=False)
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


def unmount(image: Path, mount_point: Path) -> None:
    """Unmount and detach; a no-op for what is already gone."""
    # A server that just dropped the export may hold the filesystem a
    # moment longer: retry "busy" briefly before failing.
    for attempt in range(25):
        if not is_mounted(mount_point):
            break
        try:
            commands.run(["umount", str(mount_point)])
        except commands.CommandFailed as exc:
            if "busy" not in exc.last_line or attempt == 24:
                raise
            time.sleep(0.2)
    for device in loop_devices(image):  # a device left attached (a crash between steps)
        commands.run(["losetup", "-d", device], check=False)


def size_of(image: Path) -> int:
    return image.stat().st_size


def grow_online(image: Path, mount_point: Path, size_bytes: int) -> None:
    """Grow the image and its mounted filesystem.

    :raises CommandFailed: the kernel refused the online resize (it needs
        CAP_SYS_RESOURCE, which a container may lack): grow offline.
    """
    if size_of(image) < size_bytes:
        commands.run(["truncate", "-s", str(size_bytes), str(image)])
    mount(image, mount_point)
    devices = loop_devices(image)
    for device in devices:
        commands.run(["losetup", "-c", device])  # the loop device learns the new size
    commands.run(["resize2fs", devices[0]])


def resize_offline(image: Path, size_bytes: int) -> None:
    """Resize an unmounted image's filesystem and the image to ``size_bytes``
    (the filesystem first when shrinking, the file first when growing)."""
    growing = size_of(image) < size_bytes
    if growing:
        commands.run(["truncate", "-s", str(size_bytes), str(image)])
    # resize2fs wants a freshly checked filesystem; -p repairs what is safe.
    commands.run(["e2fsck", "-f", "-p", str(image)], check=False)
    commands.run(["resize2fs", str(image), f"{size_bytes // 1024}K"])
    if not growing:
        commands.run(["truncate", "-s", str(size_bytes), str(image)])


def used_bytes(mount_point: Path) -> int:
    st = os.statvfs(mount_point)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


@contextlib.contextmanager
def frozen(mount_point: Path) -> Iterator[None]:
    """Hold the filesystem frozen (writes wait) for a consistent copy."""
    mounted = is_mounted(mount_point)
    if mounted:
        commands.run(["fsfreeze", "-f", str(mount_point)])
    try:
        yield
    finally:
        if mounted:
            commands.run(["fsfreeze", "-u", str(mount_point)])


def copy(source: Path, target: Path) -> None:
    """A reflink where the filesystem supports it, else a sparse copy."""
    tmp = target.with_name(f".{target.name}.tmp")
    commands.run(["cp", "--reflink=auto", "--sparse=always", str(source), str(tmp)])
    os.replace(tmp, target)


def new_identity(image: Path) -> None:
    """Give a copied filesystem its own UUID: Ganesha tells filesystems
    apart by it, and refuses to export a second one with the same."""
    commands.run(["e2fsck", "-f", "-p", str(image)], check=False)
    commands.run(["tune2fs", "-U", "random", str(image)])


def remove(path: Path) -> None:
    path.unlink(missing_ok=True)
