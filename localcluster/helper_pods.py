"""What running a helper pod means, decided on plain data: the sandbox plan and the statuses.

Why: the helper runner (the I/O shell) stands in for a kubelet for helper pods only. Which
command runs with which environment, where each volume lands, and what the pod status says
afterwards are decisions worth testing without a cluster, so they live here, free of API calls.
"""

from __future__ import annotations

import dataclasses
import marshal
import os
import posixpath
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from localcluster.image_table import ImageRuntime
from localcluster.pod_env import container_environment, expand_variables

HELPER_POD_LABEL = "local-path-storage.io/helper-pod"
HELPER_POD_LABEL_VALUE = "true"
NEVER_STARTS_IMAGE = "lps.invalid/never-starts:0"
# kubelet's FallbackToLogsOnError keeps the last 80 lines, at most 2048 bytes of them.
TERMINATION_MESSAGE_MAX_LINES = 80
TERMINATION_MESSAGE_MAX_BYTES = 2048
# kubelet reads the last 4096 bytes of a container's termination-message file
# (MaxContainerTerminationMessageLength, tail.ReadAtMost).
TERMINATION_MESSAGE_FILE_MAX_BYTES = 4096
# kubelet's status manager then keeps the first 12 KiB / (containers + init containers) bytes
# of each container's message (MaxPodTerminationMessageLogLength, normalizeStatus).
POD_TERMINATION_MESSAGES_MAX_BYTES = 12 * 1024
# A container that could not start (bad mount, no such command) is reported as containerd
# does: exit code 128, reason StartError.
START_ERROR_EXIT_CODE = 128
# Secret volumes are not emulated: no pod the harness runs on a kwok node mounts one.
MATERIALIZED_VOLUME_KINDS = ("configMap", "projected", "emptyDir", "downwardAPI")


class UnsupportedPodError(ValueError):
    """The pod asks for something the helper runner cannot emulate; `reason` is CamelCase."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class Mount:
    """A bind mount of `source` (host path) at `target` (path inside the pod's root)."""

    source: str
    target: str
    read_only: bool = False
    volume_root: str = ""
    """For a subPath mount: its volume's directory, inside which the subPath must resolve."""


@dataclass(frozen=True)
class SandboxPlan:
    """Everything the in-namespace sandbox needs to run one container."""

    root: str
    argv: list[str]
    env: dict[str, str]
    working_dir: str = "/"
    mounts: list[Mount] = field(default_factory=list)
    network_namespace: str | None = None
    """A /proc/<pid>/ns/net to join (the pod's own network); None keeps the host's."""
    user: int | None = None
    group: int | None = None
    read_only_root: bool = False
    fresh_tmp: bool = True
    """A tmpfs at /tmp; real images bring their own /tmp, read-only with the root."""
    image_root: str | None = None
    """The image's unpacked root filesystem, the container's root under a writable layer of
    its own; None builds the root from the host's system directories."""
    hostname: str = ""
    """The container's hostname (its own UTS namespace), as kubelet sets it: the pod's
    spec.hostname, else its name. Programs use it as their identity (a leader election's
    holder, a log line's source)."""

    def encode(self) -> bytes:
        """As pod_sandbox.py reads it: marshal, which costs its interpreter nothing to import
        (json would be a tenth of its start-up)."""
        return marshal.dumps(asdict(self))


def node_host_path(node_dir: Path, host_path: str) -> Path:
    """Where a node's absolute `host_path` lives in the harness: under the node's directory.
    Normalising first keeps `..` from climbing out of it."""
    if not host_path.startswith("/"):
        raise UnsupportedPodError("InvalidHostPath", f"hostPath {host_path!r} is not absolute")
    relative = posixpath.normpath(host_path).lstrip("/")
    return node_dir / relative if relative else node_dir


def only_container(pod: Mapping[str, Any]) -> dict[str, Any]:
    spec = pod.get("spec", {})
    containers = spec.get("containers") or []
    if len(containers) != 1 or spec.get("initContainers"):
        raise UnsupportedPodError(
            "UnsupportedPod",
            "the local cluster runs pods with exactly one container and no init containers",
        )
    container: dict[str, Any] = containers[0]
    return container


def helper_containers(pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The containers of a helper pod in the order a kubelet runs them: its init containers one
    after another, then its one main container (helper pods have no sidecars)."""
    spec = pod.get("spec", {})
    containers = spec.get("containers") or []
    if len(containers) != 1:
        raise UnsupportedPodError(
            "UnsupportedPod", "the local cluster runs helper pods with exactly one container"
        )
    return [*(spec.get("initContainers") or []), containers[0]]


def plan_sandbox(
    pod: Mapping[str, Any],
    *,
    root: Path,
    node_dir: Path,
    materialized: Mapping[str, Path],
    env: Mapping[str, str] | None = None,
    image: ImageRuntime | None = None,
    container: Mapping[str, Any] | None = None,
) -> SandboxPlan:
    """The sandbox for one of the pod's containers (`container`, else its only one): command
    (else the `image`'s entrypoint), environment (`env`, else computed from the pod alone),
    working directory, the `image`'s root filesystem or its directories read-only at their own
    paths, and one bind mount per volume mount of that container (hostPath from the node's
    directory, other kinds from the directories in `materialized`, keyed by volume name)."""
    container = container if container is not None else only_container(pod)
    name = pod["metadata"]["name"]
    env = dict(env) if env is not None else container_environment(container, name, pod=pod)
    command = [expand_variables(str(part), env) for part in container.get("command") or []]
    args = [expand_variables(str(part), env) for part in container.get("args") or []]
    if not command and image is not None:
        command = list(image.entrypoint)
    if not command:
        raise UnsupportedPodError(
            "UnsupportedPod",
            "the helper container needs `command`: images are not pulled, so their "
            "entrypoints are unknown",
        )
    volumes = {volume["name"]: volume for volume in pod["spec"].get("volumes") or []}
    mounts = [Mount(str(path), str(path), read_only=True) for path in image.mounts] if image else []
    image_root = str(image.root) if image is not None and image.root is not None else None
    for volume_mount in container.get("volumeMounts") or []:
        volume = volumes.get(volume_mount["name"])
        if volume is None:
            raise UnsupportedPodError(
                "InvalidVolumeMount", f"volumeMount {volume_mount['name']!r} names no volume"
            )
        if "hostPath" in volume:
            source = node_host_path(node_dir, volume["hostPath"]["path"])
        elif volume["name"] in materialized:
            source = materialized[volume["name"]]
        else:
            kinds = sorted(key for key in volume if key != "name")
            raise UnsupportedPodError(
                "UnsupportedVolume",
                f"volume {volume['name']!r} of kind {', '.join(kinds)} is not emulated by "
                "the local cluster's helper runner",
            )
        sub_path = volume_mount.get("subPath")
        volume_root = ""
        if sub_path:
            volume_root = str(source)
            source = source / posixpath.normpath(sub_path).lstrip("/")
        mounts.append(
            Mount(
                source=str(source),
                target=posixpath.normpath(volume_mount["mountPath"]),
                read_only=bool(volume_mount.get("readOnly", False)),
                volume_root=volume_root,
            )
        )
    # Parents before children, so a mount nested in another volume is not hidden by it.
    mounts.sort(key=lambda mount: mount.target.count("/"))
    return SandboxPlan(
        root=str(root),
        argv=command + args,
        env=env,
        working_dir=container.get("workingDir") or (image.working_dir if image else "/"),
        mounts=mounts,
        image_root=image_root,
        hostname=pod_hostname(pod),
    )


class SubPathError(Exception):
    """A subPath a kubelet would refuse: it resolves outside its volume."""


def resolve_sub_path(mount: Mount) -> Mount:
    """A subPath mount as a kubelet makes it when it starts the container (subpath_linux.go):
    the path with its symbolic links resolved, which must stay inside the volume's own
    directory (else SubPathError), made first if it is missing; the bind then mounts that
    resolved directory, so a link planted after this look changes nothing."""
    if not mount.volume_root:
        return mount
    root = os.path.realpath(mount.volume_root)
    source = Path(mount.source)
    if not os.path.lexists(source):
        existing = source.parent
        while not os.path.lexists(existing):
            existing = existing.parent
        if not _inside(os.path.realpath(existing), root):
            raise SubPathError(f"subpath {mount.source!r} not within volume path {root!r}")
        source.mkdir(parents=True, exist_ok=True)
    resolved = os.path.realpath(source)
    if not _inside(resolved, root):
        raise SubPathError(f"subpath {resolved!r} not within volume path {root!r}")
    return dataclasses.replace(mount, source=resolved)


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def termination_message_mount(container: Mapping[str, Any], source: Path) -> Mount | None:
    """The bind mount a kubelet makes of the container's termination-message file, for an
    explicit `terminationMessagePath` outside /dev (the sandbox's /dev is the host's own, so
    the default /dev/termination-log is not emulated): what the container writes there becomes
    its termination message, on success as on failure."""
    path = container.get("terminationMessagePath")
    if not isinstance(path, str) or not path.startswith("/"):
        return None
    target = posixpath.normpath(path)
    if target == "/dev" or target.startswith("/dev/"):
        return None
    return Mount(source=str(source), target=target)


def termination_file_message(written: bytes) -> str:
    """What a kubelet reads of a termination-message file: its last 4096 bytes."""
    return written[-TERMINATION_MESSAGE_FILE_MAX_BYTES:].decode("utf-8", "replace")


def pod_message_share(pod: Mapping[str, Any], message: str) -> str:
    """What a kubelet keeps of one container's termination message in the pod's status: the
    first bytes of an even share of 12 KiB over the pod's containers."""
    spec = pod.get("spec") or {}
    containers = len(spec.get("containers") or ()) + len(spec.get("initContainers") or ())
    share = POD_TERMINATION_MESSAGES_MAX_BYTES // max(1, containers)
    return message.encode()[:share].decode("utf-8", "replace")


def pod_hostname(pod: Mapping[str, Any]) -> str:
    """kubelet's choice: spec.hostname, else the pod's name, cut to 63 characters."""
    name = pod.get("spec", {}).get("hostname") or pod.get("metadata", {}).get("name", "")
    return str(name)[:63]


def termination_message(log: bytes) -> str:
    """The tail of a failed container's output, as kubelet's FallbackToLogsOnError keeps it."""
    lines = log.splitlines(keepends=True)[-TERMINATION_MESSAGE_MAX_LINES:]
    tail = b"".join(lines)[-TERMINATION_MESSAGE_MAX_BYTES:]
    return tail.decode("utf-8", "replace")
