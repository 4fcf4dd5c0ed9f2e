"""One helper pod for several volumes of one node: what a busy node's queued setups (or
teardowns) run in, instead of a pod each. Its outcomes are read back by `batch_outcomes`.

The scripts every volume runs (the wrapper, the guard, the setup or teardown script in force,
the quota and finish scripts) are in the pod's annotations, once (config.MAX_SCRIPT_BYTES keeps
the largest script within what annotations may hold), and reach the containers as files of a
downward-API volume they mount read-only: the pod carries them once, not once per volume, and
no container starts only to write them (a kubelet starts a pod's containers one after another,
so such a container would delay every volume of the pod).

Each volume keeps what its own pod would give it: an init container of its own, with its own
environment (VOL_DIR, VOL_SIZE_BYTES, ...), only its own directory writable (the base path
read-only for the guard, as in `pod_shapes`), and the validated setup or teardown script behind
the same guard. A kubelet runs init containers one after another and stops at the first that
fails, so each volume's container is wrapped: the wrapper runs the guarded script under the
volume's own timeout (cmdTimeoutSeconds), records its exit code in a result file of its own
(an emptyDir subPath no other volume sees) and in its termination message with a bounded tail
of its output, and exits 0, so the next volume still runs and one failure fails that volume
alone.

Termination messages are how the outcomes come back, and a kubelet keeps little of them: the
last 4096 bytes of each container's file, then the first 12 KiB / (number of containers) of
each message. So every message puts its outcome first and is sized to that share, and a batch
holds at most MAX_BATCH_VOLUMES volumes, for which the finish container's outcome line (one
character per volume) still fits.

The main container is the provisioner's fixed `finish` step for every volume that needs it,
with the base paths writable: after a teardown that succeeded (never after one that failed:
it reads the volume's result file), and after a setup that failed (as a single pod's failed
setup is followed by `finish`). It reports one line per volume in its termination message.

Only volumes whose single pod would run the scripts through the guard in one step are batched:
a configured setupCommand/teardownCommand (the image may have no shell for the wrapper) and a
nested volume whose parents `prepare` must make first (its data hostPath must exist before a
pod that mounts it can start) keep their own pods, as do the volumes of a base path that may
not be made (base_path_checks) and those whose path is long (BATCHABLE_PATH_BYTES). One
volume's part that would not start (an argument or environment string execve refuses) is not
built: that volume fails alone (VolumePartError).
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from provisioner.configuration.config import MAX_ARG_STRLEN, ConfigBundle
from provisioner.helper_pods.pod_shapes import (
    BASE_VIEW,
    FINISH_CONTAINER,
    FINISH_SCRIPT,
    GUARD_SCRIPT,
    HELPER_ACTION_LABEL,
    HelperAction,
    HelperTarget,
    helper_pod_frame,
    helper_steps,
    removal_environment,
    step_container,
)
from provisioner.provisioning.base_path_checks import base_host_path, volume_host_path_type
from provisioner.provisioning.paths import is_strictly_inside
from provisioner.provisioning.removal_gate import RemovalPermit

BATCH_VOLUMES_ANNOTATION = "local-path-storage.io/batch-volumes"
"""On a batch pod: the JSON list of its volumes' names, in the order of their init containers
(after the template's own)."""
RESULTS_VOLUME = "results"
RESULT_DIR = "/.local-path-storage/result"
"""Where a volume's container sees its own result directory (its subPath of the emptyDir)."""
RESULTS_DIR = "/.local-path-storage/results"
"""Where the finish container sees every volume's result directory, read-only."""
SCRIPTS_VOLUME = "scripts"
SCRIPTS_DIR = "/.local-path-storage/scripts"
"""Where the scripts every volume runs are: the downward-API volume of their annotations."""
SCRIPT_ANNOTATION_PREFIX = "local-path-storage.io/script-"
"""A batch pod's annotation of each script it runs, by file name (script-wrapper, ...)."""
OUTCOME_PATH = "/tmp/local-path-storage-outcome"
"""Every batch container's terminationMessagePath: what it writes there is its message."""
EXIT_PREFIX = "lps-exit "
"""The first line of a volume container's message: `lps-exit CODE`, then its output's tail."""
TIMED_OUT_EXIT_CODE = 124
"""What a volume whose script outran cmdTimeoutSeconds reports (as timeout(1) does)."""
FINISH_PREFIX = "lps-finish "
"""The first line of the finish container's message: `lps-finish ` and one character per
volume (o: finished, s: skipped, f: failed), then a line `INDEX CODE TAIL` per failure."""
POD_MESSAGE_BYTES = 12 * 1024
"""What a kubelet keeps of a pod's termination messages, split evenly over its containers
(MaxPodTerminationMessageLogLength); each keeps the first bytes of its share."""
CONTAINER_MESSAGE_BYTES = 4096
"""What a kubelet reads of a termination-message file: its last bytes."""
EXIT_LINE_BYTES = 16
"""Room for a volume container's `lps-exit CODE` line."""
TAIL_MAX_BYTES = 2048
MAX_BATCH_VOLUMES = 64
"""Volumes in one batch pod, at most: each container's share of the messages is then 189
bytes, the finish container's outcome line 76 (the largest --helper-batch-size)."""
DEADLINE_SLACK_SECONDS = 30
"""The pod's activeDeadlineSeconds beyond every volume's own timeout: a backstop only."""
BATCHABLE_PATH_BYTES = 1024
"""The longest volume path a batch pod takes; a longer one (the claim decision lets through
up to paths.MAX_VOLUME_PATH_BYTES) runs in a pod of its own. A batch pod holds each volume's
path five times (its container's VOL_DIR and `-p` argument, its data volume's hostPath and
mount, the finish container's LPS_DIR_<i>): MAX_BATCH_VOLUMES such paths come to 320 KiB, which
with the 256 KiB of script annotations keeps the pod far under the 1.5 MiB an object may have
in etcd, and the finish container's environment far under the 2 MiB execve takes with the usual
8 MiB stack. No tenant's long paths can make a pod too large to create, or its finish container
unable to start, for the other volumes in it."""

# $1 is setup or teardown, the rest the script's arguments. The guarded script runs in the
# background so that a watchdog can end it at the volume's timeout; what it leaves running
# ends with the container, as a kubelet ends every process of a container that exited.
VOLUME_WRAPPER = """\
set -u
action="$1"
shift
LPS_SCRIPT="$(cat "$LPS_SCRIPTS/script")"
export LPS_SCRIPT
if [ -e "$LPS_SCRIPTS/quota" ]; then
  LPS_QUOTA_SCRIPT="$(cat "$LPS_SCRIPTS/quota")"
  export LPS_QUOTA_SCRIPT
fi
out="$LPS_RESULT_DIR/output"
/bin/sh -c "$(cat "$LPS_SCRIPTS/guard")" "$action" "$@" > "$out" 2>&1 &
child=$!
( sleep "$LPS_VOLUME_TIMEOUT"; : > "$LPS_RESULT_DIR/timed-out"; kill -KILL "$child" ) \
  > /dev/null 2>&1 &
watchdog=$!
wait "$child"
status=$?
kill "$watchdog" > /dev/null 2>&1
if [ -e "$LPS_RESULT_DIR/timed-out" ]; then
  echo "timed out after ${LPS_VOLUME_TIMEOUT}s" >> "$out"
  status=124
fi
echo "$status" > "$LPS_RESULT_DIR/status"
{ echo "lps-exit $status"; tail -c "$LPS_TAIL_BYTES" "$out"; } > "$LPS_MESSAGE"
exit 0
"""

# The outcome line first (see FINISH_PREFIX), then a line per failure, cut to the message's
# share, which a kubelet keeps from its start. LPS_ACTION says whose result allows `finish`: a
# teardown's success (create: a setup's failure).
BATCH_FINISH_SCRIPT = """\
set -u
nl='
'
outcomes=""
failures=""
i=0
while [ "$i" -lt "$LPS_COUNT" ]; do
  eval "dir=\\$LPS_DIR_$i base=\\$LPS_BASE_$i owner=\\$LPS_OWNER_$i"
  eval "made_only=\\${LPS_MADE_ONLY_$i:-} absent_ok=\\${LPS_ABSENT_OK_$i:-}"
  status="$(cat "$LPS_RESULTS/v$i/status" 2>/dev/null)" || status=""
  case "$LPS_ACTION:$status" in
    delete:0 | create:[1-9]*) run=yes ;;
    *) run=no ;;
  esac
  if [ "$run" = no ]; then
    outcomes="${outcomes}s"
  elif out="$(VOL_DIR="$dir" LPS_BASE="$base" LPS_REMOVAL_OWNER="$owner" \\
      LPS_REMOVAL_MADE_ONLY="$made_only" LPS_REMOVAL_ABSENT_OK="$absent_ok" \\
      /bin/sh "$LPS_SCRIPTS/finish" 2>&1)"; then
    outcomes="${outcomes}o"
  else
    code=$?
    tail="$(printf '%s' "$out" | tail -c "$LPS_LINE_BYTES" | tr '\\n' ' ')"
    outcomes="${outcomes}f"
    failures="$failures$i $code $tail$nl"
  fi
  i=$((i + 1))
done
printf 'lps-finish %s\\n%s' "$outcomes" "$failures" | head -c "$LPS_MESSAGE_BYTES" > "$LPS_MESSAGE"
"""


class VolumePartError(ValueError):
    """One volume's part of a batch pod could not be built from its input: that volume fails
    alone, and the batch is built again without it."""

    def __init__(self, volume_name: str, cause: Exception) -> None:
        super().__init__(f"building the helper pod part of volume {volume_name}: {cause}")
        self.volume_name = volume_name


def is_batchable(action: HelperAction, target: HelperTarget, bundle: ConfigBundle) -> bool:
    """Whether the volume may share a batch pod (see the module's docstring for why not)."""
    config = bundle.config
    if config.setup_command if action == "create" else config.teardown_command:
        return False
    if not target.base_path or not is_strictly_inside(target.path, target.base_path):
        return False
    if len(target.path.encode()) > BATCHABLE_PATH_BYTES:
        return False
    if action == "delete":
        # A teardown on a base path that is never made mounts its volume as `Directory`: one
        # whose directory is gone would hold the whole pod, not its own, until the deadline.
        return config.base_path_rules(target.base_path).create
    return helper_steps("create", target, config) == ("create",)


def batch_pod_name(action: HelperAction, volume_names: Sequence[str]) -> str:
    """Deterministic for one batch (a retried create finds its pod), distinct per batch."""
    digest = hashlib.sha256("\n".join(volume_names).encode()).hexdigest()[:20]
    return f"helper-batch-{action}-{digest}"


def batch_volume_names(pod: Mapping[str, Any]) -> list[str]:
    """The volumes a batch pod serves, in order; [] for any other pod."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    try:
        names = json.loads(annotations.get(BATCH_VOLUMES_ANNOTATION) or "[]")
    except ValueError:
        return []
    if not isinstance(names, list):
        return []
    return [name for name in names if isinstance(name, str)]


def volume_container_name(action: HelperAction, index: int) -> str:
    return f"{'setup' if action == 'create' else 'teardown'}-{index}"


def message_bytes(containers: int) -> int:
    """What a kubelet keeps of each container's termination message in a pod of `containers`
    (init containers included)."""
    return min(CONTAINER_MESSAGE_BYTES, POD_MESSAGE_BYTES // max(1, containers))


def tail_bytes(message: int) -> int:
    """A volume container's output tail, after its `lps-exit` line, within its message."""
    return max(0, min(TAIL_MAX_BYTES, message - EXIT_LINE_BYTES))


def finish_line_bytes(message: int, count: int) -> int:
    """A failed finish's output tail: what its message has left after the outcome line (the
    whole message is cut to its share, so several failures share what is left)."""
    return max(16, message - len(FINISH_PREFIX) - count - EXIT_LINE_BYTES)


def build_batch_helper_pod(
    action: HelperAction,
    targets: Sequence[HelperTarget],
    bundle: ConfigBundle,
    namespace: str,
    service_account: str,
    *,
    permits: Mapping[str, RemovalPermit],
) -> dict[str, Any]:
    """The batch pod for `targets` (at least two, one node, each `is_batchable`). Its finish
    container removes directories (and a teardown's containers empty them), so every volume
    needs the removal gate's permit, by its name in `permits`; one without fails alone."""
    if len(targets) < 2:
        raise ValueError("a batch pod serves at least two volumes; one gets its own pod")
    if len(targets) > MAX_BATCH_VOLUMES:
        raise ValueError(f"a batch pod serves at most {MAX_BATCH_VOLUMES} volumes")
    nodes = {target.node_name for target in targets}
    if len(nodes) != 1:
        raise ValueError(f"a batch pod serves one node, not {sorted(map(str, nodes))}")
    names = [target.volume_name for target in targets]
    if len(set(names)) != len(names):
        raise ValueError("a batch pod serves each volume once")
    for target in targets:
        if not is_batchable(action, target, bundle):
            raise ValueError(f"volume {target.volume_name} needs a helper pod of its own")
    pod = helper_pod_frame(
        bundle,
        namespace,
        service_account,
        name=batch_pod_name(action, names),
        labels={HELPER_ACTION_LABEL: action},
        node_name=targets[0].node_name,
    )
    pod["metadata"]["annotations"] = {
        **(pod["metadata"].get("annotations") or {}),
        BATCH_VOLUMES_ANNOTATION: json.dumps(names),
    }
    spec = pod["spec"]
    timeout = bundle.config.cmd_timeout_seconds
    spec["activeDeadlineSeconds"] = timeout * len(targets) + DEADLINE_SLACK_SECONDS
    bases = sorted({target.base_path for target in targets})
    base_volume = {base: f"base-{index}" for index, base in enumerate(bases)}
    rules = bundle.config.base_path_rules
    volumes: list[dict[str, Any]] = [
        {"name": base_volume[base], "hostPath": base_host_path(base, rules(base))} for base in bases
    ]
    volumes += [
        {
            "name": f"data-{index}",
            "hostPath": {
                "path": t.path,
                "type": volume_host_path_type(rules(t.base_path)),
            },
        }
        for index, t in enumerate(targets)
    ]
    volumes.append({"name": RESULTS_VOLUME, "emptyDir": {}})
    ours = {volume["name"] for volume in volumes} | {SCRIPTS_VOLUME}
    template = _without_mounts(spec["containers"][0], ours)
    spec["volumes"] = [v for v in spec.get("volumes") or () if v.get("name") not in ours]
    spec["volumes"] += volumes
    # The template's init containers, one per volume and the finish.
    containers = len(spec.get("initContainers") or ()) + len(targets) + 1
    message = message_bytes(containers)
    if len(FINISH_PREFIX) + len(targets) + 1 > message:
        raise ValueError(f"{containers} containers leave no room for the batch's outcome line")
    built = []
    removals: list[dict[str, str]] = []
    for index, target in enumerate(targets):
        try:
            removals.append(removal_environment("finish", target, permits.get(target.volume_name)))
            built.append(
                _volume_container(
                    action,
                    index,
                    target,
                    bundle=bundle,
                    template=template,
                    base_volume=base_volume,
                    message=message,
                    removal=removals[-1] if action == "delete" else {},
                )
            )
        except Exception as error:  # whatever a volume's input does, it fails that volume alone
            raise VolumePartError(target.volume_name, error) from error
    scripts = built[0][1]
    if any(staged != scripts for _, staged in built):
        raise ValueError("the volumes of a batch must run the same scripts")
    files = {
        "wrapper": VOLUME_WRAPPER,
        "finish": FINISH_SCRIPT,
        "batch-finish": BATCH_FINISH_SCRIPT,
        **scripts,
    }
    pod["metadata"]["annotations"].update(
        {f"{SCRIPT_ANNOTATION_PREFIX}{name}": text for name, text in files.items()}
    )
    spec["volumes"].append(_scripts_volume(sorted(files)))
    spec["initContainers"] = [
        *(spec.get("initContainers") or ()),
        *(container for container, _ in built),
    ]
    spec["containers"][0] = _finish_container(
        action, targets, template, base_volume, message, removals=removals
    )
    return pod


def _without_mounts(container: Mapping[str, Any], names: set[str]) -> dict[str, Any]:
    copied = copy.deepcopy(dict(container))
    copied["volumeMounts"] = [
        m for m in copied.get("volumeMounts") or () if m.get("name") not in names
    ]
    return copied


SCRIPTS_MOUNT = {"name": SCRIPTS_VOLUME, "mountPath": SCRIPTS_DIR, "readOnly": True}
STAGED_ENV = {"LPS_SCRIPT": "script", "LPS_QUOTA_SCRIPT": "quota"}
"""What the volume's own pod passes in its environment and a batch pod stages instead (with
the file it is staged as)."""


def _volume_container(
    action: HelperAction,
    index: int,
    target: HelperTarget,
    *,
    bundle: ConfigBundle,
    template: Mapping[str, Any],
    base_volume: Mapping[str, str],
    message: int,
    removal: Mapping[str, str],
) -> tuple[dict[str, Any], dict[str, str]]:
    """The volume's guarded script, as its own pod would run it, inside the wrapper, which
    reads the scripts from the staged files; and those files' contents, by name."""
    mounts: list[dict[str, Any]] = [
        {"name": base_volume[target.base_path], "mountPath": BASE_VIEW, "readOnly": True},
        {"name": f"data-{index}", "mountPath": target.path},
        {"name": RESULTS_VOLUME, "mountPath": RESULT_DIR, "subPath": f"v{index}"},
        SCRIPTS_MOUNT,
    ]
    container = step_container(action, target, bundle, template, mounts, removal=removal)
    shell, flag, guard, script = container["command"]
    if (shell, flag, guard) != ("/bin/sh", "-c", GUARD_SCRIPT):
        raise ValueError(f"volume {target.volume_name} does not run through the guard")
    container["name"] = volume_container_name(action, index)
    container["command"] = ["/bin/sh", f"{SCRIPTS_DIR}/wrapper", script]
    staged = {"guard": guard}
    kept = []
    for variable in container["env"]:
        if variable["name"] in STAGED_ENV:
            staged[STAGED_ENV[variable["name"]]] = variable["value"]
        else:
            kept.append(variable)
    container["env"] = [
        *kept,
        {"name": "LPS_SCRIPTS", "value": SCRIPTS_DIR},
        {"name": "LPS_RESULT_DIR", "value": RESULT_DIR},
        {"name": "LPS_VOLUME_TIMEOUT", "value": str(bundle.config.cmd_timeout_seconds)},
        {"name": "LPS_TAIL_BYTES", "value": str(tail_bytes(message))},
        {"name": "LPS_MESSAGE", "value": OUTCOME_PATH},
    ]
    container["terminationMessagePath"] = OUTCOME_PATH
    check_exec_strings(container)
    return container, staged


def check_exec_strings(container: Mapping[str, Any]) -> None:
    """Raises ValueError naming the first argument or environment string of the container that
    execve would refuse (E2BIG): such a container never starts, and in a batch pod the kubelet
    would start none of the containers after it."""
    env = [f"{e['name']}={e.get('value', '')}" for e in container.get("env") or ()]
    strings = [*(container.get("command") or ()), *(container.get("args") or ()), *env]
    for text in strings:
        size = len(text.encode()) + 1
        if size > MAX_ARG_STRLEN:
            raise ValueError(
                f"{text[:40]!r}... is {size} bytes, over the {MAX_ARG_STRLEN} execve takes in"
                " one argument or environment string"
            )


def _scripts_volume(names: Sequence[str]) -> dict[str, Any]:
    """The scripts as files, from the pod's own annotations: a kubelet writes them before any
    container starts, and mounts them read-only."""
    items = [
        {
            "path": name,
            "fieldRef": {"fieldPath": f"metadata.annotations['{SCRIPT_ANNOTATION_PREFIX}{name}']"},
        }
        for name in names
    ]
    return {"name": SCRIPTS_VOLUME, "downwardAPI": {"items": items}}


def _finish_container(
    action: HelperAction,
    targets: Sequence[HelperTarget],
    template: Mapping[str, Any],
    base_volume: Mapping[str, str],
    message: int,
    *,
    removals: Sequence[Mapping[str, str]],
) -> dict[str, Any]:
    container = copy.deepcopy(dict(template))
    container["name"] = FINISH_CONTAINER
    container["volumeMounts"] = [
        *container["volumeMounts"],
        *({"name": name, "mountPath": base} for base, name in sorted(base_volume.items())),
        {"name": RESULTS_VOLUME, "mountPath": RESULTS_DIR, "readOnly": True},
        SCRIPTS_MOUNT,
    ]
    env = {
        "LPS_ACTION": action,
        "LPS_COUNT": str(len(targets)),
        "LPS_RESULTS": RESULTS_DIR,
        "LPS_SCRIPTS": SCRIPTS_DIR,
        "LPS_MESSAGE": OUTCOME_PATH,
        "LPS_LINE_BYTES": str(finish_line_bytes(message, len(targets))),
        "LPS_MESSAGE_BYTES": str(message),
    }
    for index, target in enumerate(targets):
        env[f"LPS_DIR_{index}"] = target.path
        env[f"LPS_BASE_{index}"] = target.base_path
        removal = removals[index]
        env[f"LPS_OWNER_{index}"] = removal["LPS_REMOVAL_OWNER"]
        for flag, name in (
            ("LPS_MADE_ONLY", "LPS_REMOVAL_MADE_ONLY"),
            ("LPS_ABSENT_OK", "LPS_REMOVAL_ABSENT_OK"),
        ):
            if name in removal:
                env[f"{flag}_{index}"] = removal[name]
    kept = [e for e in container.get("env") or () if e.get("name") not in env]
    container["env"] = kept + [{"name": k, "value": v} for k, v in env.items()]
    container["command"], container["args"] = ["/bin/sh", f"{SCRIPTS_DIR}/batch-finish"], []
    container["terminationMessagePath"] = OUTCOME_PATH
    container["terminationMessagePolicy"] = "FallbackToLogsOnError"
    return container
