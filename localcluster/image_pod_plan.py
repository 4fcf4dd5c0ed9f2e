"""What running an image-table pod means, decided on plain data.

Why: the environment a kubelet adds (the API server's service variables), the security
context it applies, whether an exited container restarts and after what back-off are rules
worth testing without a cluster; the worker (pod_worker.py) only carries them out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from localcluster.image_table import ImageRuntime
from localcluster.pod_env import DEFAULT_PATH

DEFAULT_GRACE_SECONDS = 30


class ContainerConfigError(ValueError):
    """The container cannot be created as specified (kubelet: CreateContainerConfigError)."""


@dataclass(frozen=True)
class RestartBackoff:
    """The kubelet's crash-loop back-off: the first restart at once, then `initial_seconds`
    doubling up to `max_seconds`; forgotten after 2 x `max_seconds` without a restart."""

    initial_seconds: float = 10.0
    max_seconds: float = 300.0

    def delay(self, restarts_in_a_row: int) -> float:
        """The wait before restart number `restarts_in_a_row` (1 = the first) of a run."""
        if restarts_in_a_row <= 1:
            return 0.0
        doubled = self.initial_seconds * float(2 ** (restarts_in_a_row - 2))
        return min(self.max_seconds, doubled)

    def expired(self, seconds_since_last_restart: float) -> bool:
        return seconds_since_last_restart > 2 * self.max_seconds


def should_restart(restart_policy: str, exit_code: int) -> bool:
    if restart_policy == "Never":
        return False
    return restart_policy != "OnFailure" or exit_code != 0


def service_environment(api_port: int) -> dict[str, str]:
    """The `kubernetes` Service's variables, pointing at the pod's relay to the API server."""
    return {
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(api_port),
        "KUBERNETES_SERVICE_PORT_HTTPS": str(api_port),
        "KUBERNETES_PORT": f"tcp://127.0.0.1:{api_port}",
        f"KUBERNETES_PORT_{api_port}_TCP": f"tcp://127.0.0.1:{api_port}",
        f"KUBERNETES_PORT_{api_port}_TCP_PROTO": "tcp",
        f"KUBERNETES_PORT_{api_port}_TCP_PORT": str(api_port),
        f"KUBERNETES_PORT_{api_port}_TCP_ADDR": "127.0.0.1",
    }


def environment_defaults(runtime: ImageRuntime, api_port: int, user: int | None) -> dict[str, str]:
    """PATH with the image's directories first, HOME as a runtime sets it for the user, the
    image's own environment over both (an image's config names its PATH and HOME), and the
    service variables."""
    path = ":".join([*(str(directory) for directory in runtime.path), DEFAULT_PATH])
    home = "/root" if user in (None, 0) else "/"
    python_path = (
        {"PYTHONPATH": ":".join(map(str, runtime.python_path))} if runtime.python_path else {}
    )
    return {
        "PATH": path,
        "HOME": home,
        **python_path,
        **runtime.env,
        **service_environment(api_port),
    }


@dataclass(frozen=True)
class SecuritySettings:
    user: int | None
    group: int | None
    read_only_root: bool


def security_settings(
    pod: Mapping[str, Any], container: Mapping[str, Any], image: ImageRuntime | None = None
) -> SecuritySettings:
    """The container's securityContext over the pod's (runAsUser, runAsGroup, runAsNonRoot,
    readOnlyRootFilesystem), over the `image`'s User. supplementalGroups and fsGroup are not
    emulated: the provisioner's Deployment sets neither."""
    pod_context = pod["spec"].get("securityContext") or {}
    context = {**pod_context, **(container.get("securityContext") or {})}
    user = context.get("runAsUser")
    group = context.get("runAsGroup")
    if user is None and image is not None and image.user is not None:
        user = image.user
        group = image.group if group is None else group
    if context.get("runAsNonRoot") and user in (None, 0):
        raise ContainerConfigError(
            "container has runAsNonRoot and image will run as root (no runAsUser is set, and "
            "the image names no non-root User)"
        )
    if group is None and user is not None:
        group = 0  # as container runtimes do when an image names no group
    return SecuritySettings(
        user=None if user is None else int(user),
        group=None if group is None else int(group),
        read_only_root=bool(context.get("readOnlyRootFilesystem")),
    )


def grace_seconds(pod: Mapping[str, Any]) -> float:
    """How long a stopping container gets between SIGTERM and SIGKILL: the deletion's grace
    when the pod is being deleted, else the pod's terminationGracePeriodSeconds."""
    deletion = pod["metadata"].get("deletionGracePeriodSeconds")
    if deletion is not None:
        return float(deletion)
    return float(pod["spec"].get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS))


def config_maps_of(pod: Mapping[str, Any]) -> set[str]:
    """The ConfigMaps whose change must rewrite one of the pod's volumes."""
    names = set()
    for volume in pod["spec"].get("volumes") or []:
        if "configMap" in volume:
            names.add(str(volume["configMap"].get("name")))
        for source in (volume.get("projected") or {}).get("sources") or []:
            if "configMap" in source:
                names.add(str(source["configMap"].get("name")))
    return names
