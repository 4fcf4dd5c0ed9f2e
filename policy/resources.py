"""Reading the stack's Kubernetes objects as the policies see them: plain dicts of the
provider's inputs (camelCase), whatever program or transformation built them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import yaml

from provisioner.core.config import ConfigError, ProvisionerConfig, parse_config_json

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


@lru_cache(maxsize=64)
def parsed_config_json(text: str) -> ProvisionerConfig | ConfigError:
    """config.json as the runtime parses it, or the runtime's error: parsed once per text for
    every policy of the pack (each is called on its own with the same ConfigMap). Both results
    are immutable, so sharing them is safe."""
    try:
        return parse_config_json(text)
    except ConfigError as error:
        return error


def helper_template(files: Mapping[str, str]) -> dict[str, Any] | None:
    """helperPod.yaml as a mapping, or None when absent or not a YAML mapping (the config
    policy reports that with the runtime's message)."""
    try:
        template = yaml.safe_load(files.get("helperPod.yaml", ""))
    except yaml.YAMLError:
        return None
    return template if isinstance(template, dict) else None


def is_default_class(resource: Resource) -> bool:
    annotations = resource.metadata.get("annotations") or {}
    return any(str(annotations.get(key, "")).lower() == "true" for key in DEFAULT_CLASS_ANNOTATIONS)
