"""The fixed `clone` step: what copies a clone's source volume into its new directory, in the
clone's setup pod after the setup.

A fixed script of ours, never the setup code in force: it is what stands between a tenant's
volume contents and everything else on the node, so it is not the admin's to replace.

Why two containers of its own. The source's contents are hostile: a consumer of the source
keeps running during the copy (the source stays usable, mounted read-only here) and can swap a
directory for a symbolic link between the copy's look at it and its reads below it. GNU `cp -a`
copies links as links and never follows one, but a path it reads through such a swapped parent
resolves in the copy's own mount namespace. So the copying container sees nothing worth
reading: the helper image, the source read-only and the new directory, no base path, no token.
The checks that need the base paths (every directory is the one its PV names: reached without a
symbolic link through its base path, and the very directory mounted, device and inode) run
before it, in an init container that copies nothing. A kubelet resolves each container's mounts
when it starts that container, so the copy mounts what the check saw as long as no path above
either directory changed in between: every one is a base path or a parent `prepare` made,
never a tenant's.

The copy: `cp -a` keeps owners, modes, times, hard links (among the copied files), symbolic
links as links, extended attributes where it can; `--reflink=auto` clones extents on a
filesystem that shares them (XFS, btrfs), so a large volume copies in moments;
`--sparse=auto` keeps a sparse file's holes as holes and allocates every other file as the
source does (`--sparse=always` would also turn runs of zeros into holes, a preallocated file
into a sparse one, which may then run out of space where its source could not). It needs GNU
cp (coreutils): busybox's does neither sparse files nor reflinks, so with such a helper image
the step fails and says so. A new directory left with a partial copy by an earlier attempt (a
killed pod) is emptied first: it is this volume's own (`prepare` or its name says so, and
a class with reuseExistingData cannot clone); a copy that fails empties it, so that `finish`
removes it.
"""

from __future__ import annotations

import copy
from typing import Any

from provisioner.configuration.config import ConfigBundle
from provisioner.helper_pods.pod_shapes import (
    BASE_VIEW,
    BASE_VOLUME,
    HelperAction,
    HelperTarget,
    build_helper_pod,
    clone_source_of,
)
from provisioner.provisioning.base_path_checks import base_host_path
from provisioner.provisioning.clones import CloneSource
from provisioner.provisioning.paths import is_strictly_inside
from provisioner.provisioning.removal_gate import RemovalPermit

SOURCE_MOUNT = "/.local-path-storage/clone-source"
"""Where the source volume is mounted, read-only, in both containers."""
SOURCE_BASE_VIEW = "/.local-path-storage/source-base"
"""Where the check sees the source's base path, read-only."""
CHECK_CONTAINER = "clone-check"
COPY_CONTAINER = "clone"

CHECK_SCRIPT = """\
set -u
refuse() { echo "refusing to clone $LPS_SOURCE_DIR into $VOL_DIR: $1" >&2; exit 1; }
# $1 the directory on the host, $2 its base path, $3 where the base path is seen read-only,
# $4 where the directory itself is mounted.
check() {
  case "$1" in "$2"/*) ;; *) refuse "$1 is not inside $2" ;; esac
  view="$3${1#"$2"}"
  cd "$view" 2>/dev/null || refuse "$1 is not a directory"
  real="$(pwd -P)"
  if [ "$real" != "$view" ]; then refuse "$1 is reached through a symbolic link"; fi
  if [ "$(stat -c %d:%i .)" != "$(stat -c %d:%i "$4")" ]; then
    refuse "the directory mounted for $1 is another one"
  fi
}
check "$VOL_DIR" "$LPS_BASE" "$LPS_BASE_VIEW" "$VOL_DIR"
check "$LPS_SOURCE_DIR" "$LPS_SOURCE_BASE" "$LPS_SOURCE_BASE_VIEW" "$LPS_SOURCE_MOUNT"
"""
COPY_SCRIPT = """\
set -eu
if ! cp --version 2>/dev/null | grep -q coreutils; then
  echo "cloning needs GNU cp (coreutils) in the helper image, which has another cp: set the\\
 image in helperPod.yaml to one with coreutils (debian, ubuntu, fedora)" >&2
  exit 1
fi
empty() { find "$VOL_DIR" -mindepth 1 -maxdepth 1 -exec rm -rf -- {} + ; }
if [ -n "$(ls -A "$VOL_DIR")" ]; then
  echo "$VOL_DIR holds an earlier attempt's partial copy: emptying it"
  empty
fi
if ! cp -a --reflink=auto --sparse=auto -T -- "$LPS_SOURCE_MOUNT" "$VOL_DIR"; then
  empty
  echo "copying $LPS_SOURCE_DIR failed (above); $VOL_DIR was emptied" >&2
  exit 1
fi
echo "copied $LPS_SOURCE_DIR into $VOL_DIR"
"""


def build_action_pod(
    action: HelperAction,
    target: HelperTarget,
    bundle: ConfigBundle,
    namespace: str,
    service_account: str,
    *,
    permit: RemovalPermit | None = None,
) -> dict[str, Any]:
    """The one pod of a volume's own helper run (`permit`: see `build_helper_pod`): a clone's
    setup pod goes on, after the setup, with the clone's check and copy."""
    pod = build_helper_pod(action, target, bundle, namespace, service_account, permit=permit)
    if action == "create" and clone_source_of(target) is not None:
        add_clone(pod, target, bundle)
    return pod


def add_clone(pod: dict[str, Any], target: HelperTarget, bundle: ConfigBundle) -> None:
    """The setup pod `pod` made a clone's: its setup becomes an init container, followed by
    the check (init) and the copy (main). Both see the new directory as the setup does."""
    source = clone_source_of(target)
    if source is None:
        raise ValueError(f"volume {target.volume_name} is not a clone")
    if not source.base_path or not is_strictly_inside(source.path, source.base_path):
        raise ValueError(
            f"path {source.path!r} is not strictly inside its base path {source.base_path!r}"
        )
    spec = pod["spec"]
    (setup,) = spec["containers"]
    (data_mount,) = [m for m in setup["volumeMounts"] if m["mountPath"] == target.path]
    config = bundle.config
    spec["volumes"] = [
        *spec["volumes"],
        {
            "name": "source-base",
            "hostPath": base_host_path(source.base_path, config.base_path_rules(source.base_path)),
        },
        {"name": "source", "hostPath": {"path": source.path, "type": "Directory"}},
    ]
    copy_mounts: list[dict[str, Any]] = [
        {"name": "source", "mountPath": SOURCE_MOUNT, "readOnly": True},
        dict(data_mount),
    ]
    check_mounts: list[dict[str, Any]] = [
        *copy_mounts,
        {"name": BASE_VOLUME, "mountPath": BASE_VIEW, "readOnly": True},
        {"name": "source-base", "mountPath": SOURCE_BASE_VIEW, "readOnly": True},
    ]
    template = bundle.helper_pod_template["spec"]["containers"][0]
    spec["initContainers"] = [
        *(spec.get("initContainers") or ()),
        setup,
        _container(
            template, CHECK_CONTAINER, CHECK_SCRIPT, check_mounts, target=target, source=source
        ),
    ]
    spec["containers"] = [
        _container(template, COPY_CONTAINER, COPY_SCRIPT, copy_mounts, target=target, source=source)
    ]


def _container(
    template: dict[str, Any],
    name: str,
    script: str,
    mounts: list[dict[str, Any]],
    *,
    target: HelperTarget,
    source: CloneSource,
) -> dict[str, Any]:
    container = copy.deepcopy(template)
    env = {
        "VOL_DIR": target.path,
        "LPS_BASE": target.base_path,
        "LPS_SOURCE_DIR": source.path,
        "LPS_SOURCE_BASE": source.base_path,
        "LPS_SOURCE_MOUNT": SOURCE_MOUNT,
        "LPS_BASE_VIEW": BASE_VIEW,
        "LPS_SOURCE_BASE_VIEW": SOURCE_BASE_VIEW,
    }
    kept = [e for e in container.get("env") or () if e.get("name") not in env]
    container.update(
        name=name,
        command=["/bin/sh", "-c", script, name],
        args=[],
        volumeMounts=mounts,
        env=kept + [{"name": k, "value": v} for k, v in env.items()],
        terminationMessagePolicy="FallbackToLogsOnError",
    )
    return container
