"""The kernel's mount table (/proc/self/mountinfo) read as facts: pure.

The plugin keeps no state of its own: whether a target is published, from which directory, and
read-only or not, is read back from here, so a restarted plugin knows what its predecessor did.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass

DELETED_SUFFIX = "//deleted"
"""What the kernel appends to a mount's root when the directory behind it was removed."""
_ESCAPE = re.compile(r"\\([0-7]{3})")


@dataclass(frozen=True)
class MountEntry:
    """One line of mountinfo: the device, the directory of that filesystem mounted (`root`),
    where (`mount_point`), and the per-mount options (`ro`/`rw`, ...)."""

    device: str
    root: str
    mount_point: str
    options: frozenset[str]
    fs_type: str = ""
    """The filesystem type after mountinfo's " - " separator ("btrfs", "ext4", ...)."""

    @property
    def read_only(self) -> bool:
        return "ro" in self.options

    @property
    def root_deleted(self) -> bool:
        return self.root.endswith(DELETED_SUFFIX)


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash in paths as octal escapes."""
    return _ESCAPE.sub(lambda match: chr(int(match.group(1), 8)), field)


def parse_mountinfo(text: str) -> list[MountEntry]:
    entries = []
    for line in text.splitlines():
        fields = line.split(" ")
        if len(fields) < 6:
            continue
        # optional fields (shared:N, master:N) come before the "-"; the type follows it
        separator = fields.index("-", 6) if "-" in fields[6:] else -1
        fs_type = fields[separator + 1] if 0 < separator < len(fields) - 1 else ""
        entries.append(
            MountEntry(
                device=fields[2],
                root=_unescape(fields[3]),
                mount_point=_unescape(fields[4]),
                options=frozenset(fields[5].split(",")),
                fs_type=_unescape(fs_type),
            )
        )
    return entries


def mount_at(entries: list[MountEntry], path: str) -> MountEntry | None:
    """The mount visible at exactly `path` (the last one mounted there), if any."""
    found = None
    for entry in entries:
        if entry.mount_point == path:
            found = entry
    return found


def containing_mount(entries: list[MountEntry], path: str) -> MountEntry | None:
    """The mount `path` lies on: the visible one with the longest mount point above it."""
    best: MountEntry | None = None
    for entry in entries:
        point = entry.mount_point
        inside = point in (path, "/") or path.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best.mount_point)):
            best = entry
    return best


def published_directory(
    entries: list[MountEntry],
    target: MountEntry,
    base_paths: list[str],
    unmounted_disks: Sequence[str] = (),
) -> tuple[str, str] | None:
    """(base path, directory path) of the volume mounted at `target`, when its source lies
    strictly inside one of `base_paths`; None when it is not one of this node's volumes.

    A bind mount's root is a path within its filesystem; a base path's place in that filesystem
    is its own mount's root joined with where it lies below that mount point.

    `unmounted_disks`: base paths that must be a disk's mount point and are not now. A volume
    of such a disk, still bound into a pod, keeps the disk's filesystem alive; its root is then
    a path from that disk's top, on a device the base path no longer shows. With exactly one
    such base path, that is where the volume is; with more, which one cannot be told."""
    root = target.root.removesuffix(DELETED_SUFFIX)
    for base_path in base_paths:
        base_mount = containing_mount(entries, base_path)
        if base_mount is None or base_mount.device != target.device:
            continue
        below = posixpath.relpath(base_path, base_mount.mount_point)
        in_filesystem = posixpath.normpath(posixpath.join(base_mount.root, below))
        prefix = in_filesystem.rstrip("/") + "/"
        if root.startswith(prefix) and root != in_filesystem:
            return base_path, posixpath.join(base_path, root[len(prefix) :])
    if len(unmounted_disks) == 1 and root != "/":
        (base_path,) = unmounted_disks
        now = containing_mount(entries, base_path)
        if now is None or now.device != target.device:
            return base_path, posixpath.join(base_path, root.lstrip("/"))
    return None
