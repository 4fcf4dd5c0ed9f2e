"""A base path that is not there, or not mounted, gets no volume (config.json's `create` and
`mountPoint`, see config.BasePathRules).

Why: when a node's data disk is not mounted (after a reboot, a failed fstab entry), a hostPath
`DirectoryOrCreate` makes the base path on the root filesystem; volumes then fill it and
vanish under the mount when the disk comes back. So:

- A base path that may not be created is mounted as hostPath `Directory` by every helper pod:
  the kubelet makes nothing and the pod does not start while the path is missing (the
  provisioner's event then names the node and the path, see `missing_base_path_hint`). No
  hostPath below it is `DirectoryOrCreate` either (the kubelet would make the base path on the
  way): its volumes are always made by `prepare`, and a teardown mounts the volume as
  `Directory`.
- A declared mount point is checked by `prepare` before it makes anything: the base path must
  be the root of a mounted filesystem, as the helper's /proc/self/mountinfo shows it (field 4,
  the root of the mount within its filesystem, is `/`). `mountpoint -q` is not in every
  busybox, and comparing `stat -c %d` with the parent cannot work in a pod, where the parent
  is the container's own filesystem. A bind mount of a subdirectory, or a btrfs subvolume, has
  another root there: declare its own mount point instead.
"""

from __future__ import annotations

from typing import Any

from provisioner.configuration.config import BasePathRules

# Part of PREPARE_SCRIPT, before it makes anything: LPS_MOUNT_POINT is the base path as
# mountinfo writes it (octal escapes), set only for a declared mount point.
MOUNT_POINT_CHECK = """\
mountinfo="${LPS_MOUNTINFO:-/proc/self/mountinfo}"
if [ -n "${LPS_MOUNT_POINT:-}" ] && ! awk \\
    '$5 == ENVIRON["LPS_MOUNT_POINT"] && $4 == "/" { found = 1 } END { exit !found }' "$mountinfo"
then
  refuse "its base path $LPS_BASE is declared a mount point (mountPoint in config.json), but no\\
 filesystem is mounted there on this node: mount it (see /etc/fstab), or correct config.json"
fi
"""


def base_host_path(path: str, rules: BasePathRules) -> dict[str, Any]:
    """The hostPath source of a base path, for any helper pod."""
    return {"path": path, "type": "DirectoryOrCreate" if rules.create else "Directory"}


def volume_host_path_type(rules: BasePathRules) -> str:
    """The hostPath type of a volume's own directory: `Directory` when its base path may not
    be made on the way. (A directory `prepare` makes is a subPath instead: a hostPath volume is
    checked when its pod starts, before the pod's `prepare` ran.)"""
    return "DirectoryOrCreate" if rules.create else "Directory"


def needs_prepare(rules: BasePathRules) -> bool:
    """Whether every volume of the base path is made by `prepare` (the kubelet could make
    the base path itself on the way to a `DirectoryOrCreate` below it)."""
    return not rules.create or rules.mount_point


def mount_point_environment(base_path: str, rules: BasePathRules) -> dict[str, str]:
    return {"LPS_MOUNT_POINT": mountinfo_path(base_path)} if rules.mount_point else {}


def mountinfo_path(path: str) -> str:
    """A path as /proc/self/mountinfo writes it: space, tab, line break and backslash octal."""
    return "".join(f"\\{ord(c):03o}" if c in " \t\n\\" else c for c in path)


def missing_base_path_hint(base_path: str, node: str, rules: BasePathRules) -> str:
    """What a helper that never started most likely means, for a base path that is not made."""
    if rules.create:
        return ""
    return (
        f" (the base path {base_path} must exist on node {node}: config.json says it is not"
        " created; mount its disk, or create it, or set create: true for it)"
    )
