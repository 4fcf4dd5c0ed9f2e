"""Helper pods mount the host's storage as root: three policies keep them as the provisioner
built them, each lifted only by a stack that opts in (see pack.py's stack config keys).

- `no-unsafe-helper-template`: a workload runs the provisioner with
  `--allow-unsafe-helper-template` (as its own parser reads the command line and env), which
  turns off its own allow-list for helper templates. A pod spec in a kind the pack does not
  read (resources.UNREADABLE) that would run the provisioner is reported too: what its
  controller runs cannot be told.
- `unprivileged-helper-pod`: the ConfigMap's helperPod.yaml asks for more than the provisioner
  needs. "More" is exactly what the runtime refuses without that flag
  (provisioner.configuration.pod_template.validate_helper_template): privileged, added capabilities,
  host namespaces, root set explicitly, extra volumes, unconfined profiles and every field not known
  to be harmless. One allow-list, the runtime's.
- `pinned-helper-image`: the helper image has no tag or is `:latest`, so the code that runs
  as root on every node changes whenever the registry's copy does.
"""

from __future__ import annotations

import json

from policy.provisioner_runs import provisioner_runs
from policy.resources import (
    CONFIG_MAP,
    UNREADABLE,
    WORKLOADS,
    KubeObject,
    Resource,
    check_objects,
    config_map_files,
    helper_template,
)
from provisioner.configuration.config import ConfigError
from provisioner.configuration.pod_template import validate_helper_template

UNSAFE_FLAG = "no-unsafe-helper-template"
PRIVILEGED = "unprivileged-helper-pod"
PINNED_IMAGE = "pinned-helper-image"
_READ_KINDS = ", ".join(sorted(WORKLOADS))


def check_unsafe_flag(resource: Resource) -> list[str]:
    return check_objects(
        resource,
        {**dict.fromkeys(WORKLOADS, _unsafe_flag), UNREADABLE: _unreadable_template},
    )


def check_privileged(resource: Resource) -> list[str]:
    return check_objects(resource, {CONFIG_MAP: _privileged})


def check_pinned_image(resource: Resource) -> list[str]:
    return check_objects(resource, {CONFIG_MAP: _pinned_image})


def _unsafe_flag(workload: KubeObject) -> list[str]:
    """Decided by the provisioner's own option parser on the container's command line and
    env (see provisioner_runs): what it would run with, in every spelling it accepts."""
    messages = []
    for run in provisioner_runs(workload):
        where = f"{workload.label} container {run.name}"
        if run.options is not None and run.options.allow_unsafe_helper_template:
            messages.append(
                f"{where}: the provisioner runs with --allow-unsafe-helper-template (stack "
                "config allowUnsafeHelperTemplate: true, the flag in any spelling or "
                "ALLOW_UNSAFE_HELPER_TEMPLATE), which lets any helperPod.yaml run as root on "
                "every node: set allowUnsafeHelperTemplate to false, or accept the risk with "
                "local-path-storage-policy:allowUnsafeHelperTemplate"
            )
        elif run.unverifiable:
            messages.append(
                f"{where}: whether the provisioner runs with --allow-unsafe-helper-template "
                f"cannot be told ({'; '.join(run.unverifiable)}): give the value literally in "
                "env or args, or accept the risk with "
                "local-path-storage-policy:allowUnsafeHelperTemplate"
            )
    return messages


def _unreadable_template(pod_spec: KubeObject) -> list[str]:
    """A pod spec the pack cannot read (resources.UNREADABLE) that would run the provisioner,
    as provisioner_runs identifies it: its `command` runs it, or it has no `command` (its
    image's ENTRYPOINT runs, which may be the provisioner's)."""
    runs = [
        f"container {run.name} "
        + ("runs it" if run.container.get("command") else "has no command (its image's may be it)")
        for run in provisioner_runs(pod_spec)
    ]
    if not runs:
        return []
    return [
        f"{pod_spec.label}: this pod spec may run the provisioner ({'; '.join(runs)}), but the "
        "pack does not read this kind, so it cannot tell what its controller runs nor whether "
        "that runs with --allow-unsafe-helper-template: run the provisioner from one of the "
        f"kinds the pack reads ({_READ_KINDS}, their Patch or List), give a container that is "
        "not the provisioner its command, or accept the risk with "
        "local-path-storage-policy:allowUnsafeHelperTemplate"
    ]


def _privileged(config_map: KubeObject) -> list[str]:
    files = config_map_files(config_map)
    template = helper_template(files) if files is not None else None
    if template is None:
        return []
    try:
        validate_helper_template(template, allow_unsafe=False)
    except ConfigError as error:
        return [
            f"{config_map.label} {error}: the helper pod gets more than the provisioner "
            "needs; remove it from helperPodTemplate, or accept the risk with "
            "local-path-storage-policy:allowPrivilegedHelper"
        ]
    return []


def image_problem(image: str) -> str | None:
    """Why `image` is not pinned, or None. A digest pins it; else the last path component
    needs a tag other than latest (a registry's `host:port/` is not a tag)."""
    if "@" in image:
        return None
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return f"{json.dumps(image)} has no tag, which means :latest"
    if last.rsplit(":", 1)[1] == "latest":
        return f"{json.dumps(image)} is :latest"
    return None


def _pinned_image(config_map: KubeObject) -> list[str]:
    files = config_map_files(config_map)
    template = helper_template(files) if files is not None else None
    messages = []
    spec = (template or {}).get("spec") or {}
    for index, container in enumerate(spec.get("containers") or ()):
        image = container.get("image") if isinstance(container, dict) else None
        problem = image_problem(image) if isinstance(image, str) else None
        if problem is not None:
            messages.append(
                f"{config_map.label} helperPod.yaml spec.containers[{index}].image: "
                f"{problem}, so what runs as root on the nodes changes with the registry: set "
                "helperImage to a fixed version or digest (busybox:1.37.0), or accept the risk "
                "with local-path-storage-policy:allowUnpinnedHelperImage"
            )
    return messages
