"""The helper pod for one action (its outcome is read by helper_pods/pod_outcomes.py, the one
interpreter of a helper pod's status), built from the validated helperPod.yaml
(pod_template.py).

Unlike rancher, the helper runs under a service account with no rights and no token mounted,
carries a deadline (cmdTimeoutSeconds) the kubelet enforces, and writes its log tail into the
termination message, so a failed script is reported at once instead of at the timeout.
"""

from __future__ import annotations

import copy
import hashlib
import posixpath
import textwrap
from collections.abc import Mapping
from typing import Any, Literal, Protocol

from provisioner.capacity.quota import quota_environment
from provisioner.configuration.config import ConfigBundle, ProvisionerConfig
from provisioner.provisioning.base_path_checks import (
    MOUNT_POINT_CHECK,
    base_host_path,
    mount_point_environment,
    needs_prepare,
    volume_host_path_type,
)
from provisioner.provisioning.clones import CloneSource
from provisioner.provisioning.fresh_directory import (
    CLAIM_DIRECTORY,
    FORGET_DIRECTORY,
    OWNER_CHECK,
)
from provisioner.provisioning.paths import is_named_for_volume, is_strictly_inside
from provisioner.provisioning.removal_gate import OwnerCheck, RemovalPermit

HELPER_POD_LABEL = "local-path-storage.io/helper-pod"
HELPER_POD_LABEL_VALUE = "true"
HELPER_POD_SELECTOR = f"{HELPER_POD_LABEL}={HELPER_POD_LABEL_VALUE}"
"""The label selector that picks our helper pods (and only those)."""
HELPER_ACTION_LABEL = "local-path-storage.io/helper-action"
HELPER_VOLUME_LABEL = "local-path-storage.io/volume"
HELPER_GRACE_SECONDS = 5
"""A helper pod's terminationGracePeriodSeconds unless helperPod.yaml sets one: a custom
command that handles TERM has that long to stop."""
DATA_VOLUME = "data"

HelperAction = Literal["create", "delete"]
HelperStep = Literal["prepare", "create", "clone", "delete", "finish"]
"""A helper pod's part in an action. `create` and `delete` run the setup and teardown code in
force (a ConfigMap script or a custom command: arbitrary code); `prepare` and `finish` are the
provisioner's own fixed scripts, which make and remove the volume's directory; `clone`, also
fixed, copies a clone's source into it (clone_step.py)."""
HELPER_STEPS: dict[HelperAction, tuple[HelperStep, ...]] = {
    "create": ("prepare", "create", "clone", "finish"),
    "delete": ("delete",),
}
"""Every step an action may take (see `helper_steps` for those a given volume takes; a
`create` whose setup failed takes `finish` to remove the directory it left empty). An action
runs in one pod, its steps containers in sequence: `prepare` and the setup, then a clone's
check and copy (clone_step.py); the teardown, then `finish` (see `build_helper_pod`). A kubelet
starts each container after the one before it ended, about a second later, but a pod costs
more: its sandbox, its scheduling, its status round trips."""
PREPARE_CONTAINER = "prepare"
TEARDOWN_CONTAINER = "teardown"
FINISH_CONTAINER = "finish"


class HelperTarget(Protocol):
    """What a helper pod works on: a ProvisionPlan or a TeardownPlan."""

    @property
    def volume_name(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def node_name(self) -> str | None: ...
    @property
    def volume_mode(self) -> str: ...
    @property
    def size_bytes(self) -> int: ...
    @property
    def vol_user(self) -> str: ...
    @property
    def vol_group(self) -> str: ...
    @property
    def vol_perm(self) -> str: ...
    @property
    def base_path(self) -> str: ...


def helper_pod_name(step: HelperStep, volume_name: str) -> str:
    """Deterministic per volume and step (a retry finds its pod), at most 63 characters."""
    name = f"helper-{step}-{volume_name}"
    if len(name) <= 63:
        return name
    digest = hashlib.sha256(volume_name.encode()).hexdigest()[:10]
    return f"{name[:52].rstrip('-.')}-{digest}"


def label_value(value: str) -> str:
    """A volume name as a label value (at most 63 characters, deterministic)."""
    if len(value) <= 63:
        return value
    return f"{value[:52].rstrip('-._')}-{hashlib.sha256(value.encode()).hexdigest()[:10]}"


BASE_VIEW = "/.local-path-storage/base"
"""Where setup and teardown code sees the base path, read-only: how the guard checks that the
directory mounted read-write at VOL_DIR is the real one."""
BASE_VOLUME = "base"

# How every script on one volume's path begins: VOL_DIR must lie inside LPS_BASE.
INSIDE_BASE = """\
refuse() { echo "refusing $VOL_DIR: $1" >&2; exit 1; }
case "$VOL_DIR" in "$LPS_BASE"/*) ;; *) refuse "it is not inside $LPS_BASE" ;; esac
"""
# One step down from the base towards VOL_DIR, in a loop over `rest` (what is left of VOL_DIR
# below `dir`): the next component in `dir`, refused if it is a symbolic link.
NEXT_COMPONENT = """\
part="${rest%%/*}"
if [ "$part" = "$rest" ]; then rest=""; else rest="${rest#*/}"; fi
dir="$dir/$part"
if [ -L "$dir" ]; then refuse "$dir is a symbolic link"; fi
"""


# The provisioner's own steps, with the base path mounted read-write at its own path. Neither
# follows a symbolic link: a tenant owns what is inside its volume and can plant links there.
# Two modes of `prepare` only the node plugin asks for (a helper pod never: the provisioner
# builds its environment): LPS_PARENTS_ONLY makes and checks every parent but not VOL_DIR
# itself (the plugin then makes VOL_DIR as a btrfs subvolume through its parent's descriptor),
# and LPS_NODE_MADE says the plugin made VOL_DIR just now, so the marker says made, not reused.
# `finish` also removes the parents a pathPattern made (`<base>/<namespace>` for
# "{{ .PVC.Namespace }}/{{ .PVC.Name }}"), deepest first, while they are empty, never the base
# path. A sibling's `prepare` may find such a parent, then see it removed before it makes its
# own directory in it (the parent was empty until then): `mkdir` fails, and it walks again.
# Once the sibling's directory exists the parent is not empty and no `finish` removes it.
PREPARE_SCRIPT = (
    "set -eu\n"
    + INSIDE_BASE
    + MOUNT_POINT_CHECK
    + """\
make_path() {
  dir="$LPS_BASE"
  rest="${VOL_DIR#"$LPS_BASE"/}"
  while [ -n "$rest" ]; do
"""
    + textwrap.indent(NEXT_COMPONENT, "    ")
    + """\
    if [ -n "$rest" ]; then
      if [ ! -d "$dir" ]; then mkdir "$dir" 2>/dev/null || [ -d "$dir" ] || return 1; fi
    elif [ -n "${LPS_PARENTS_ONLY:-}" ]; then :
    elif mkdir "$dir" 2>/dev/null; then fresh=yes
    elif [ ! -d "$dir" ]; then return 1
    fi
  done
}
fresh="${LPS_NODE_MADE:-}"
attempt=1
until make_path; do
  if [ "$attempt" -ge 5 ]; then refuse "cannot create $dir"; fi
  echo "$dir: its parent vanished (a sibling's teardown removed it empty); again" >&2
  attempt=$((attempt + 1))
done
if [ -n "${LPS_PARENTS_ONLY:-}" ]; then exit 0; fi
cd "$VOL_DIR"
real="$(pwd -P)"
if [ "$real" != "$VOL_DIR" ]; then refuse "its real path is $real"; fi
"""
    + CLAIM_DIRECTORY
)
FINISH_SCRIPT = (
    "set -eu\n"
    + INSIDE_BASE
    + 'owners_root="$LPS_BASE"\n'
    + OWNER_CHECK
    + """\
dir="$LPS_BASE"
deepest="$LPS_BASE"
rest="${VOL_DIR#"$LPS_BASE"/}"
while [ -n "$rest" ]; do
"""
    + textwrap.indent(NEXT_COMPONENT, "  ")
    + """\
  if [ ! -e "$dir" ]; then break; fi
  deepest="$dir"
done
if [ "$deepest" = "$VOL_DIR" ]; then
  left="$(ls -A "$VOL_DIR" | wc -l)"
  rmdir "$VOL_DIR" 2>/dev/null || refuse "the teardown left $left entries in it"
  deepest="${VOL_DIR%/*}"
fi
if [ ! -e "$VOL_DIR" ]; then
"""
    + textwrap.indent(FORGET_DIRECTORY, "  ")
    + """\
fi
while [ "$deepest" != "$LPS_BASE" ]; do
  if [ -L "$deepest" ] || ! rmdir "$deepest" 2>/dev/null; then break; fi
  deepest="${deepest%/*}"
done
"""
)
# Runs before the setup or teardown code, in its pod: VOL_DIR must be the real directory, seen
# through the read-only base path without a symbolic link, and the read-write mount at VOL_DIR
# must be that very directory (device and inode), not one a link redirected the host mount to.
# rancher's teardown `rm -rf "$VOL_DIR"` cannot remove the mount point itself: once its content
# is gone, the teardown has done its part and the `finish` step removes the directory. After a
# setup that succeeded, the quota step (see `quota`) limits the directory where it can. Before a
# teardown, the removal's owner check (fresh_directory.OWNER_CHECK) runs first, through the
# read-only base path: a teardown pod that starts late removes nothing another volume now owns.
# Before that, a base path declared a mount point must have its filesystem mounted (as
# `prepare` checks before a setup): else VOL_DIR is a directory on the root filesystem under
# the empty mount point, and removing it would let the PV go while its data waits on the disk.
GUARD_SCRIPT = (
    "set -u\n"
    + INSIDE_BASE
    + 'if [ "$0" = teardown ]; then\n'
    + MOUNT_POINT_CHECK
    + '  owners_root="$LPS_BASE_VIEW"\n'
    + textwrap.indent(OWNER_CHECK, "  ")
    + "fi\n"
    + """\
view="$LPS_BASE_VIEW${VOL_DIR#"$LPS_BASE"}"
cd "$view" 2>/dev/null || refuse "it is not a directory"
real="$(pwd -P)"
case "$real" in
  "$view") ;;
  "$LPS_BASE_VIEW"/*) refuse "its real path is $LPS_BASE${real#"$LPS_BASE_VIEW"}" ;;
  *) refuse "its real path is outside $LPS_BASE" ;;
esac
if [ "$(stat -c %d:%i .)" != "$(stat -c %d:%i "$VOL_DIR")" ]; then
  refuse "the directory mounted at it is another one"
fi
cd /
if [ -n "${LPS_COMMAND:-}" ]; then "$LPS_COMMAND" "$@"; else sh -c "$LPS_SCRIPT" "$0" "$@"; fi
status=$?
if [ "$status" -eq 0 ] && [ -n "${LPS_QUOTA_SCRIPT:-}" ]; then
  sh -c "$LPS_QUOTA_SCRIPT" quota || status=$?
fi
if [ "$status" -ne 0 ] && [ "$0" = teardown ] && [ -z "$(ls -A "$VOL_DIR")" ]; then exit 0; fi
exit "$status"
"""
)


def helper_steps(
    action: HelperAction, target: HelperTarget, config: ProvisionerConfig
) -> tuple[HelperStep, ...]:
    """The pods an action takes, in order. A volume directly in its base path, named for it,
    needs no `prepare`: the kubelet makes one directory in the base path, where no tenant can
    plant a link, and one already there can only be its own (see fresh_directory). Any other
    is made by `prepare`, one component at a time, and never handed out holding someone
    else's data; so is every volume of a base path that must exist or be a mount point (see
    base_path_checks). A clone's copy comes last, after the setup made the directory ready
    (its quota included, so the copy counts against it)."""
    if action == "create":
        named = is_named_for_volume(target.path, target.base_path, target.volume_name)
        steps: tuple[HelperStep, ...] = ("create",)
        if not named or needs_prepare(config.base_path_rules(target.base_path)):
            steps = ("prepare", "create")
        return (*steps, "clone") if clone_source_of(target) is not None else steps
    return ("delete",)


def clone_source_of(target: HelperTarget) -> CloneSource | None:
    """The volume a target copies; only a ProvisionPlan of a clone names one."""
    source = getattr(target, "clone_source", None)
    return source if isinstance(source, CloneSource) else None


def build_helper_pod(
    step: HelperStep,
    target: HelperTarget,
    bundle: ConfigBundle,
    namespace: str,
    service_account: str,
    *,
    permit: RemovalPermit | None = None,
) -> dict[str, Any]:
    """The helper pod manifest for one step; a step that removes or empties the directory
    (`delete`, `finish`) only with the gate's permit for it (removal_gate). A node-local
    helper is bound to the volume's node; a shared filesystem helper is left to the scheduler,
    which weighs taints and readiness as for any pod (rancher pins it to a node of its own
    choosing).

    What each container can write: `prepare` and `finish`, the provisioner's fixed scripts, the
    base path; `create` and `delete`, the setup and teardown code in force, only VOL_DIR (the
    base path is read-only at BASE_VIEW, for the guard). A `delete` pod runs the teardown code
    in an init container and `finish` after it in the main container, each with its own
    mounts. A `create` whose directory `prepare` makes runs `prepare` in an init container
    before the setup, and the setup sees the directory as a subPath of the base path: a kubelet
    resolves a subPath when it starts the container, after `prepare` made it, and only inside
    its volume (a hostPath volume of the directory itself would be checked at the pod's start,
    before anything made it). rancher mounts the volume's parent read-write for all of it."""
    if not target.base_path or not is_strictly_inside(target.path, target.base_path):
        raise ValueError(
            f"volume path {target.path!r} is not strictly inside its base path {target.base_path!r}"
        )
    removal = removal_environment(step, target, permit)
    pod = helper_pod_frame(
        bundle,
        namespace,
        service_account,
        name=helper_pod_name(step, target.volume_name),
        labels={
            HELPER_ACTION_LABEL: step,
            HELPER_VOLUME_LABEL: label_value(target.volume_name),
        },
        node_name=target.node_name,
    )
    spec = pod["spec"]
    prepared = step == "create" and "prepare" in helper_steps("create", target, bundle.config)
    volumes, mounts = _mounts(step, target, bundle.config, prepared=prepared)
    ours = {DATA_VOLUME, BASE_VOLUME}
    spec["volumes"] = [v for v in spec.get("volumes") or () if v.get("name") not in ours] + volumes
    template_container = spec["containers"][0]
    container = step_container(step, target, bundle, template_container, mounts, removal=removal)
    if prepared:
        _, prepare_mounts = _mounts("prepare", target, bundle.config)
        prepare = step_container(
            "prepare", target, bundle, template_container, prepare_mounts, removal={}
        )
        spec["initContainers"] = [
            *(spec.get("initContainers") or ()),
            {**prepare, "name": PREPARE_CONTAINER},
        ]
    if step != "delete":
        spec["containers"][0] = container
        return pod
    # One pod per teardown, two containers: the teardown code, which may reach only VOL_DIR,
    # runs first as an init container; the fixed `finish` step, which needs the base path
    # read-write to remove the directory and the empty parents a pattern made, runs after it
    # in the main container, only if the teardown succeeded (a kubelet runs init containers in
    # order and fails the pod at the first that fails, the main one never started).
    _, finish_mounts = _mounts("finish", target, bundle.config)
    finish = step_container(
        "finish", target, bundle, template_container, finish_mounts, removal=removal
    )
    spec["initContainers"] = [
        *(spec.get("initContainers") or ()),
        {**container, "name": TEARDOWN_CONTAINER},
    ]
    spec["containers"][0] = {**finish, "name": FINISH_CONTAINER}
    return pod


REMOVING_STEPS: tuple[HelperStep, ...] = ("delete", "finish")
"""The steps that remove or empty the volume's directory: built only with a permit."""


def removal_environment(
    step: HelperStep, target: HelperTarget, permit: RemovalPermit | None
) -> dict[str, str]:
    """The owner check a removing step runs on the node (fresh_directory.OWNER_CHECK), from
    the gate's permit for this very volume and path; {} for any other step. Raises ValueError
    when a removing step has no such permit."""
    if step not in REMOVING_STEPS:
        return {}
    if not isinstance(permit, RemovalPermit) or not permit.covers(target.volume_name, target.path):
        raise ValueError(
            f"the {step} step of volume {target.volume_name} removes {target.path}: it is built"
            " only with the removal gate's permit for that volume and path"
        )
    check = permit.check
    if check is None:
        raise ValueError(f"the permit for {target.path} is not a volume's")
    return owner_check_environment(check)


def owner_check_environment(check: OwnerCheck) -> dict[str, str]:
    """The owner check's environment (fresh_directory.OWNER_CHECK reads it): for a helper
    pod from the gate's permit, for the node plugin from the permit as the PV carries it."""
    env = {"LPS_REMOVAL_OWNER": check.owner}
    if check.made_only:
        env["LPS_REMOVAL_MADE_ONLY"] = "true"
    if check.absent_ok:
        env["LPS_REMOVAL_ABSENT_OK"] = "true"
    return env


def step_container(
    step: HelperStep,
    target: HelperTarget,
    bundle: ConfigBundle,
    template_container: Mapping[str, Any],
    mounts: list[dict[str, Any]],
    *,
    removal: Mapping[str, str],
) -> dict[str, Any]:
    """The template's container running one step: its mounts, command and environment
    (`removal`: the owner check a removing step runs, see `removal_environment`)."""
    container = copy.deepcopy(dict(template_container))
    ours = {DATA_VOLUME, BASE_VOLUME}
    container["volumeMounts"] = [
        m for m in container.get("volumeMounts") or () if m.get("name") not in ours
    ] + mounts
    container["command"], container["args"], env = step_command(
        step, target, bundle, removal=removal
    )
    kept = [e for e in container.get("env") or () if e.get("name") not in env]
    container["env"] = kept + [{"name": k, "value": v} for k, v in env.items()]
    container["terminationMessagePolicy"] = "FallbackToLogsOnError"
    return container


def helper_grace_seconds(bundle: ConfigBundle) -> int:
    """The helper pods' terminationGracePeriodSeconds: helperPod.yaml's, else ours."""
    spec = bundle.helper_pod_template.get("spec") or {}
    return int(spec.get("terminationGracePeriodSeconds", HELPER_GRACE_SECONDS))


def helper_pod_frame(
    bundle: ConfigBundle,
    namespace: str,
    service_account: str,
    *,
    name: str,
    labels: Mapping[str, str],
    node_name: str | None,
) -> dict[str, Any]:
    """The template with what every helper pod is forced to be: ours (labels), bound to its
    node, under the rightless service account without a token, never restarted, and killed at
    cmdTimeoutSeconds. The caller adds the volumes, the command and the environment."""
    pod = copy.deepcopy(bundle.helper_pod_template)
    meta = pod.get("metadata") or {}
    pod["metadata"] = {
        "name": name,
        "namespace": namespace,
        "labels": {
            **(meta.get("labels") or {}),
            HELPER_POD_LABEL: HELPER_POD_LABEL_VALUE,
            **labels,
        },
    }
    if meta.get("annotations"):
        pod["metadata"]["annotations"] = meta["annotations"]
    spec = pod["spec"]
    spec.pop("serviceAccount", None)
    if node_name:
        spec["nodeName"] = node_name
    spec["serviceAccountName"] = service_account
    spec["automountServiceAccountToken"] = False
    spec["restartPolicy"] = "Never"
    spec["activeDeadlineSeconds"] = bundle.config.cmd_timeout_seconds
    # A kubelet ends a pod past its deadline as it ends a deleted one: TERM, then KILL after
    # this grace, and reports the pod Failed only once its containers stopped. The helper's
    # `sh -c` runs as the container's first process, which ignores TERM, so Kubernetes' default
    # of 30 s held every timed-out (or deleted) helper, and its report, that much longer.
    spec["terminationGracePeriodSeconds"] = helper_grace_seconds(bundle)
    if spec.get("tolerations") is None:
        spec["tolerations"] = [
            {
                "key": "node.kubernetes.io/disk-pressure",
                "operator": "Exists",
                "effect": "NoSchedule",
            }
        ]
    return pod


def _mounts(
    step: HelperStep, target: HelperTarget, config: ProvisionerConfig, *, prepared: bool = False
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The step's volumes and their mounts (`prepared`: a `create` after `prepare`)."""
    # Every hostPath is the base path or VOL_DIR, never the volume's parent (rancher's): the
    # kubelet resolves a hostPath on the host, so a parent reached through a link a tenant
    # planted would mount whatever it points at. VOL_DIR itself may be such a redirect; the
    # guard refuses it before any code runs.
    rules = config.base_path_rules(target.base_path)
    base = base_host_path(target.base_path, rules)
    volumes: list[dict[str, Any]]
    mounts: list[dict[str, Any]]
    if step in ("prepare", "finish"):
        volumes = [{"name": BASE_VOLUME, "hostPath": base}]
        mounts = [{"name": BASE_VOLUME, "mountPath": target.base_path}]
    elif prepared:
        # Made by `prepare` in the same pod: a subPath, resolved when the setup starts.
        volumes = [{"name": BASE_VOLUME, "hostPath": base}]
        mounts = [
            {"name": BASE_VOLUME, "mountPath": BASE_VIEW, "readOnly": True},
            data_sub_path_mount(target),
        ]
    else:
        volumes = [
            {"name": BASE_VOLUME, "hostPath": base},
            {
                "name": DATA_VOLUME,
                "hostPath": {
                    "path": target.path,
                    "type": volume_host_path_type(rules),
                },
            },
        ]
        mounts = [
            {"name": BASE_VOLUME, "mountPath": BASE_VIEW, "readOnly": True},
            {"name": DATA_VOLUME, "mountPath": target.path},
        ]
    return volumes, mounts


def data_sub_path_mount(target: HelperTarget) -> dict[str, Any]:
    """VOL_DIR, read-write at its own path, as a subPath of the base path's volume: for a
    directory an earlier container of the pod makes."""
    return {
        "name": BASE_VOLUME,
        "mountPath": target.path,
        "subPath": posixpath.relpath(target.path, target.base_path),
    }


def step_command(
    step: HelperStep,
    target: HelperTarget,
    bundle: ConfigBundle,
    *,
    removal: Mapping[str, str],
    base_view: str = BASE_VIEW,
) -> tuple[list[str], list[str], dict[str, str]]:
    """One step's command, arguments and environment: what its helper container runs, and
    what the node plugin runs for a CSI volume (node_volumes), from this one source.
    `removal`: the owner check a removing step runs (`owner_check_environment`); `base_view`:
    where the setup and teardown code's guard sees the base path (a pod mounts it read-only at
    BASE_VIEW; the node plugin has it at its own path)."""
    if step in REMOVING_STEPS and not removal.get("LPS_REMOVAL_OWNER"):
        raise ValueError(
            f"the {step} step of volume {target.volume_name} removes {target.path}: it needs"
            " the owner check of the removal gate's permit"
        )
    env = {
        "VOL_DIR": target.path,
        "VOL_MODE": target.volume_mode,
        "VOL_SIZE_BYTES": str(target.size_bytes),
        "VOL_USER": target.vol_user,
        "VOL_GROUP": target.vol_group,
        "VOL_PERM": target.vol_perm,
        "LPS_BASE": target.base_path,
        **removal,
    }
    command, args = _command(step, target, bundle, env, base_view)
    return command, args, env


def _command(
    step: HelperStep,
    target: HelperTarget,
    bundle: ConfigBundle,
    env: dict[str, str],
    base_view: str,
) -> tuple[list[str], list[str]]:
    """The step's command and arguments; adds what the guard needs to `env`."""
    args = ["-p", target.path, "-s", str(target.size_bytes), "-m", target.volume_mode]
    if step == "prepare":
        env["LPS_VOLUME"] = target.volume_name
        rules = bundle.config.base_path_rules(target.base_path)
        env.update(mount_point_environment(target.base_path, rules))
        # Only a ProvisionPlan carries the class's choice (see fresh_directory).
        if getattr(target, "reuse_existing_data", False) is True:
            env["LPS_REUSE_EXISTING_DATA"] = "true"
        return ["/bin/sh", "-c", PREPARE_SCRIPT, step], []
    if step == "finish":
        return ["/bin/sh", "-c", FINISH_SCRIPT, step], []
    action: HelperAction = "create" if step == "create" else "delete"
    config = bundle.config
    custom = config.setup_command if action == "create" else config.teardown_command
    # The validated script in force, not the ConfigMap's current file: a version the
    # provisioner refused must never be what runs. The guard then calls it as rancher does,
    # `sh -c SCRIPT setup -p PATH -s SIZE -m MODE -a ACTION` (or the command with those
    # arguments), with the same $0-$N as rancher's `sh /script/setup ARGS`.
    env["LPS_BASE_VIEW"] = base_view
    if action == "create":
        env.update(quota_environment(target.volume_name, target.size_bytes))
    else:
        # The guard's mount point check, where this pod (or the node plugin) sees the base path.
        env.update(mount_point_environment(base_view, config.base_path_rules(target.base_path)))
    if custom:
        env["LPS_COMMAND"] = custom
    else:
        script_text = bundle.setup_script if action == "create" else bundle.teardown_script
        env["LPS_SCRIPT"] = script_text
    script = "setup" if action == "create" else "teardown"
    return ["/bin/sh", "-c", GUARD_SCRIPT, script], [*args, "-a", action]
