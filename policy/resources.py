"""Reading the stack's Kubernetes objects as the policies see them: plain dicts of the
provider's inputs (camelCase), whatever program or transformation built them."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
STORAGE_CLASS = "kubernetes:storage.k8s.io/v1:StorageClass"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
CLUSTER_ROLE = "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole"
ROLE = "kubernetes:rbac.authorization.k8s.io/v1:Role"
CLUSTER_ROLE_BINDING = "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding"
ROLE_BINDING = "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding"

DEFAULT_CLASS_ANNOTATIONS = (
    "storageclass.kubernetes.io/is-default-class",
    "storageclass.beta.kubernetes.io/is-default-class",
)
PROVISIONER_COMMAND = "local-path-storage-provisioner"


@dataclass(frozen=True)
class Resource:
    """One resource of the stack: its type token, its inputs and its URN (to report on)."""

    type: str
    props: Mapping[str, Any]
    urn: str = ""

    @property
    def name(self) -> str:
        """metadata.name, or the URN's last part when the object has no name yet."""
        name = self.metadata.get("name")
        return str(name) if isinstance(name, str) else self.urn.rsplit("::", 1)[-1]

    @property
    def metadata(self) -> Mapping[str, Any]:
        metadata = self.props.get("metadata")
        return metadata if isinstance(metadata, Mapping) else {}


def config_map_files(resource: Resource) -> dict[str, str] | None:
    """The data of a provisioner ConfigMap (one holding config.json), else None."""
    if resource.type != CONFIG_MAP:
        return None
    data = resource.props.get("data")
    if not isinstance(data, Mapping) or not isinstance(data.get("config.json"), str):
        return None
    return {str(key): value for key, value in data.items() if isinstance(value, str)}


def helper_template(files: Mapping[str, str]) -> dict[str, Any] | None:
    """helperPod.yaml as a mapping, or None when absent or not a YAML mapping (the config
    policy reports that with the runtime's message)."""
    try:
        template = yaml.safe_load(files.get("helperPod.yaml", ""))
    except yaml.YAMLError:
        return None
    return template if isinstance(template, dict) else None


def provisioner_containers(resource: Resource) -> Iterator[Mapping[str, Any]]:
    """The containers of a Deployment that run the provisioner."""
    if resource.type != DEPLOYMENT:
        return
    spec = resource.props.get("spec") or {}
    pod = (spec.get("template") or {}).get("spec") or {}
    for container in pod.get("containers") or ():
        command = [*(container.get("command") or ()), *(container.get("args") or ())]
        if any(PROVISIONER_COMMAND in str(part) for part in command):
            yield container


def flag_value(container: Mapping[str, Any], flag: str, environment: str) -> bool | None:
    """A boolean flag of the provisioner (`--x`, `--x=true`, `--no-x`), or its environment
    variable; None when neither is given (the runtime's default then applies)."""
    for argument in reversed(container.get("args") or ()):
        text = str(argument)
        if text == f"--{flag}":
            return True
        if text == f"--no-{flag}":
            return False
        if text.startswith(f"--{flag}="):
            return text.split("=", 1)[1].lower() in ("1", "t", "true")
    for variable in container.get("env") or ():
        if variable.get("name") == environment and isinstance(variable.get("value"), str):
            return str(variable["value"]).lower() in ("1", "t", "true")
    return None


def is_default_class(resource: Resource) -> bool:
    annotations = resource.metadata.get("annotations") or {}
    return any(str(annotations.get(key, "")).lower() == "true" for key in DEFAULT_CLASS_ANNOTATIONS)
