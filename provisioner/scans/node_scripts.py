"""Helper pods that look at a base path as a whole, not at one volume: the listing that finds
orphans (read-only) and the removal of one orphan (under the teardown rules).

A listing comes back through the container's termination-message file (`RESULT_PATH`, at most
4096 bytes by the kubelet's rule): the helper pods have no credentials to write anywhere, and a
pod's log needs a kubelet that serves it. So the listing helper does the filtering itself and
prints only what matters (orphans and missing directories), not the base path's content: it is
given the paths PVs and in-flight helpers hold and never looks into them, so no tenant's file
names leave the node. The provisioner checks the result again (see `orphans`).
"""

from __future__ import annotations

import hashlib
import textwrap
from collections.abc import Sequence
from typing import Any

from provisioner.configuration.config import ConfigBundle
from provisioner.helper_pods.pod_shapes import (
    BASE_VOLUME,
    HELPER_ACTION_LABEL,
    INSIDE_BASE,
    NEXT_COMPONENT,
    helper_pod_frame,
)
from provisioner.objects.snapshot_handoff import SNAPSHOT_AREA
from provisioner.provisioning.base_path_checks import (
    MOUNT_POINT_CHECK,
    base_host_path,
    mount_point_environment,
)
from provisioner.provisioning.fresh_directory import OWNERS_DIR
from provisioner.provisioning.paths import is_strictly_inside
from provisioner.provisioning.removal_gate import RemovalKind, RemovalPermit

RESULT_PATH = "/tmp/local-path-storage-result"
"""The helper's terminationMessagePath: what it writes there becomes its termination message."""
REMOVE_ORPHAN_ACTION = "remove-orphan"
RESULT_BUDGET_BYTES = 3900
"""Below the kubelet's 4096 bytes, with room for the `truncated` and `end` lines."""

# Walks the base path breadth first without following a symbolic link, descending only into
# directories that hold an owned path (LPS_OWNED, relative, one per line), never into an owned
# one, nor into the provisioner's owners directory (LPS_OWNERS_DIR: see fresh_directory) or
# its snapshot area (LPS_SNAPSHOT_AREA: the snapshots' own, never an orphan).
# Prints `now EPOCH`, one `KIND MTIME RELATIVE` per entry no owner holds, `missing
# RELATIVE` per owned path that is not a plain directory, then `end`.
LIST_SCRIPT = """\
set -eu
NL='
'
out="$LPS_RESULT"
: > "$out"
budget="$LPS_BUDGET"
emit() {
  if [ $((${#1} + 1)) -gt "$budget" ]; then echo truncated >> "$out"; echo end >> "$out"; exit 0; fi
  printf '%s\\n' "$1" >> "$out"
  budget=$((budget - ${#1} - 1))
}
emit "now $(date +%s)"
owned="$NL${LPS_OWNED:-}$NL"
skipped=0
queue="."
while [ -n "$queue" ]; do
  rel="${queue%%"$NL"*}"
  if [ "$rel" = "$queue" ]; then queue=""; else queue="${queue#*"$NL"}"; fi
  if [ "$rel" = . ]; then dir="$LPS_BASE"; else dir="$LPS_BASE/$rel"; fi
  if [ -L "$dir" ] || [ ! -d "$dir" ]; then continue; fi
  for entry in "$dir"/* "$dir"/.[!.]* "$dir"/..?*; do
    if [ ! -e "$entry" ] && [ ! -L "$entry" ]; then continue; fi
    name="${entry##*/}"
    if [ "$rel" = . ]; then child="$name"; else child="$rel/$name"; fi
    case "$child" in *"$NL"*) skipped=$((skipped + 1)); continue ;; esac
    case "$owned" in *"$NL$child$NL"*) continue ;; esac
    if [ "$child" = "${LPS_OWNERS_DIR:-}" ]; then continue; fi
    if [ "$child" = "${LPS_SNAPSHOT_AREA:-}" ]; then continue; fi
    if [ -L "$entry" ]; then kind=symlink
    elif [ -d "$entry" ]; then
      case "$owned" in *"$NL$child/"*) queue="$queue${queue:+$NL}$child"; continue ;; esac
      kind=directory
    elif [ -f "$entry" ]; then kind=file
    else kind=other
    fi
    emit "$kind $(stat -c %Y "$entry") $child"
  done
done
rest="${LPS_OWNED:-}"
while [ -n "$rest" ]; do
  rel="${rest%%"$NL"*}"
  if [ "$rel" = "$rest" ]; then rest=""; else rest="${rest#*"$NL"}"; fi
  if [ -L "$LPS_BASE/$rel" ] || [ ! -d "$LPS_BASE/$rel" ]; then emit "missing $rel"; fi
done
if [ "$skipped" -gt 0 ]; then emit "skipped $skipped"; fi
echo end >> "$out"
"""

# Removes one orphan directory, with the base path mounted read-write at its own path: no
# component may be a symbolic link, the orphan must be a plain directory whose modification
# time is older than LPS_MIN_AGE seconds on the node's clock (a setup that made something in
# it, or a tenant writing into it, makes it young again).
REMOVE_SCRIPT = (
    "set -eu\n"
    + INSIDE_BASE
    + """\
dir="$LPS_BASE"
rest="${VOL_DIR#"$LPS_BASE"/}"
while [ -n "$rest" ]; do
"""
    + textwrap.indent(NEXT_COMPONENT, "  ")
    + """\
  if [ ! -e "$dir" ]; then echo "$VOL_DIR is already gone"; exit 0; fi
done
if [ ! -d "$VOL_DIR" ]; then refuse "it is not a directory"; fi
age=$(($(date +%s) - $(stat -c %Y "$VOL_DIR")))
if [ "$age" -lt "$LPS_MIN_AGE" ]; then refuse "it changed ${age}s ago"; fi
rm -rf -- "$VOL_DIR"
echo "removed $VOL_DIR"
"""
)


# Whether a volume's directory is gone, seen through the base path alone, read-only: `gone`
# when a component of VOL_DIR is missing, `present` otherwise; a symbolic link on the way is
# refused (nothing is proven), as is a base path declared a mount point with nothing mounted
# (the directory would only seem gone). For a teardown pod that never started: one waits for a
# missing hostPath of type `Directory` (a base path that may not be made) until its deadline.
PRESENCE_SCRIPT = (
    "set -eu\n"
    + INSIDE_BASE
    + MOUNT_POINT_CHECK
    + """\
dir="$LPS_BASE"
rest="${VOL_DIR#"$LPS_BASE"/}"
while [ -n "$rest" ]; do
"""
    + textwrap.indent(NEXT_COMPONENT, "  ")
    + """\
  if [ ! -e "$dir" ]; then echo gone > "$LPS_RESULT"; exit 0; fi
done
echo present > "$LPS_RESULT"
"""
)
PRESENCE_ACTION = "presence"


def _pod_name(prefix: str, *parts: str) -> str:
    digest = hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:16]
    return f"{prefix}-{digest}"


def build_listing_pod(
    bundle: ConfigBundle,
    namespace: str,
    service_account: str,
    *,
    node: str,
    base_path: str,
    owned: Sequence[str],
    caller: str = "scan",
) -> dict[str, Any]:
    """The read-only listing of `base_path` on `node`; `owned` relative to it. `caller` keeps
    the pod names of the provisioner's scan and of the command apart."""
    pod = helper_pod_frame(
        bundle,
        namespace,
        service_account,
        name=_pod_name(f"helper-list-{caller}", node, base_path),
        labels={HELPER_ACTION_LABEL: "list"},
        node_name=node,
    )
    env = {
        "LPS_BASE": base_path,
        "LPS_OWNED": "\n".join(owned),
        "LPS_RESULT": RESULT_PATH,
        "LPS_BUDGET": str(RESULT_BUDGET_BYTES),
        "LPS_OWNERS_DIR": OWNERS_DIR,
        "LPS_SNAPSHOT_AREA": SNAPSHOT_AREA,
    }
    _finish(pod, base_path, LIST_SCRIPT, "list", env, read_only=True, bundle=bundle)
    return pod


def build_presence_pod(
    bundle: ConfigBundle,
    namespace: str,
    service_account: str,
    *,
    node: str | None,
    base_path: str,
    path: str,
) -> dict[str, Any]:
    """The read-only look at whether `path` is still there (see PRESENCE_SCRIPT): its
    termination message is `gone` or `present`."""
    if not is_strictly_inside(path, base_path):
        raise ValueError(f"{path!r} is not strictly inside the base path {base_path!r}")
    pod = helper_pod_frame(
        bundle,
        namespace,
        service_account,
        name=_pod_name("helper-presence", node or "", path),
        labels={HELPER_ACTION_LABEL: PRESENCE_ACTION},
        node_name=node,
    )
    env = {
        "LPS_BASE": base_path,
        "VOL_DIR": path,
        "LPS_RESULT": RESULT_PATH,
        **mount_point_environment(base_path, bundle.config.base_path_rules(base_path)),
    }
    _finish(pod, base_path, PRESENCE_SCRIPT, PRESENCE_ACTION, env, read_only=True, bundle=bundle)
    return pod


def build_orphan_removal_pod(
    bundle: ConfigBundle,
    namespace: str,
    service_account: str,
    *,
    node: str,
    base_path: str,
    path: str,
    min_age_seconds: int,
    permit: RemovalPermit,
) -> dict[str, Any]:
    """The removal of one orphan directory, only with the removal gate's permit for it."""
    if permit.kind is not RemovalKind.ORPHAN_REMOVAL or not permit.covers("", path):
        raise ValueError(f"removing {path} needs the removal gate's permit for that orphan")
    if not is_strictly_inside(path, base_path):
        raise ValueError(f"{path!r} is not strictly inside the base path {base_path!r}")
    pod = helper_pod_frame(
        bundle,
        namespace,
        service_account,
        name=_pod_name("helper-orphan", node, path),
        labels={HELPER_ACTION_LABEL: REMOVE_ORPHAN_ACTION},
        node_name=node,
    )
    env = {"LPS_BASE": base_path, "VOL_DIR": path, "LPS_MIN_AGE": str(min_age_seconds)}
    _finish(
        pod, base_path, REMOVE_SCRIPT, REMOVE_ORPHAN_ACTION, env, read_only=False, bundle=bundle
    )
    return pod


def _finish(
    pod: dict[str, Any],
    base_path: str,
    script: str,
    step: str,
    env: dict[str, str],
    *,
    read_only: bool,
    bundle: ConfigBundle,
) -> None:
    spec = pod["spec"]
    spec["volumes"] = [
        # As for a volume's first helper: a base path not there yet is made, empty, rather than
        # the pod waiting for it until its deadline, unless config.json says it must exist.
        {
            "name": BASE_VOLUME,
            "hostPath": base_host_path(base_path, bundle.config.base_path_rules(base_path)),
        },
    ]
    container = spec["containers"][0]
    container["volumeMounts"] = [
        {"name": BASE_VOLUME, "mountPath": base_path, "readOnly": read_only}
    ]
    container["command"], container["args"] = ["/bin/sh", "-c", script, step], []
    kept = [e for e in container.get("env") or () if e.get("name") not in env]
    container["env"] = kept + [{"name": k, "value": v} for k, v in env.items()]
    container["terminationMessagePath"] = RESULT_PATH
    container["terminationMessagePolicy"] = "FallbackToLogsOnError"
