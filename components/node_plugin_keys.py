"""Stack config `csiNodePlugin`: the CSI node plugin's DaemonSet knobs, checked at preview.

    local-path-storage:csiNodePlugin:
      kubeletDirectory: /var/lib/kubelet   # the kubelet's root on the nodes
      image: ""                            # default: the provisioner's image
      nodeSelector: {}
      tolerations: []
      priorityClassName: ""
      resources: {cpuRequest: 10m, memoryRequest: 48Mi, cpuLimit: "", memoryLimit: 128Mi}

Pure: a pydantic model in the house's shape (stack_values readers), read only when the key is
set; settings.py makes NodePluginArgs of it when a class is a CSI class.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, model_validator
from pydantic.alias_generators import to_camel

from components.args import ContainerResources, NodePluginArgs
from components.stack_values import (
    InvalidValueError,
    check_label_value,
    check_not_empty,
    check_object_name,
    check_quantity,
    optional_text,
    show,
    string,
    string_map,
    toleration_list,
    unknown_key,
)

NODE_PLUGIN_KEY = "csiNodePlugin"
NODE_PLUGIN_KEYS = (
    "kubeletDirectory",
    "image",
    "nodeSelector",
    "tolerations",
    "priorityClassName",
    "resources",
)
RESOURCE_KEYS = ("cpuRequest", "memoryRequest", "cpuLimit", "memoryLimit")
_DEFAULTS = NodePluginArgs()


def check_kubelet_directory(value: str) -> str | None:
    """An absolute, normal path: it is mounted into a privileged container as it is written."""
    parts = value.split("/")
    if not value.startswith("/") or value == "/" or "" in parts[1:] or ".." in parts:
        return (
            f"{show(value)} must be the kubelet's root directory as an absolute path without"
            ' "..", "//" or a trailing "/", e.g. /var/lib/kubelet'
        )
    return None


def _known_keys(value: object, what: str, known: tuple[str, ...]) -> object:
    if not isinstance(value, dict):
        raise InvalidValueError(f"must be {what}, got {show(value)}")
    for name in value:
        if name not in known:
            raise InvalidValueError(unknown_key(name, known), f".{name}")
    return value


class _Resources(BaseModel):
    model_config = ConfigDict(frozen=True, alias_generator=to_camel)

    cpu_request: Annotated[str, string(check_quantity)] = _DEFAULTS.resources.cpu_request
    memory_request: Annotated[str, string(check_quantity)] = _DEFAULTS.resources.memory_request
    cpu_limit: Annotated[str | None, optional_text(check_quantity)] = _DEFAULTS.resources.cpu_limit
    memory_limit: Annotated[str | None, optional_text(check_quantity)] = (
        _DEFAULTS.resources.memory_limit
    )

    @model_validator(mode="before")
    @classmethod
    def _an_object_of_known_keys(cls, value: object) -> object:
        return _known_keys(value, "an object {cpuRequest, memoryRequest, ...}", RESOURCE_KEYS)


class NodePluginKeys(BaseModel):
    """`csiNodePlugin`, each key checked in this order."""

    model_config = ConfigDict(frozen=True, alias_generator=to_camel)

    kubelet_directory: Annotated[str, string(check_kubelet_directory)] = _DEFAULTS.kubelet_directory
    image: Annotated[str | None, optional_text(check_not_empty)] = None
    node_selector: Annotated[
        dict[str, str] | None, string_map("node label keys to values", check_label_value)
    ] = None
    tolerations: Annotated[tuple[dict[str, Any], ...] | None, toleration_list()] = None
    priority_class_name: Annotated[str | None, optional_text(check_object_name)] = None
    resources: _Resources = _Resources()

    @model_validator(mode="before")
    @classmethod
    def _an_object_of_known_keys(cls, value: object) -> object:
        return _known_keys(value, "an object {kubeletDirectory, image, ...}", NODE_PLUGIN_KEYS)

    def to_args(self) -> NodePluginArgs:
        return NodePluginArgs(
            kubelet_directory=self.kubelet_directory,
            image=self.image,
            node_selector=self.node_selector or {},
            tolerations=self.tolerations or (),
            priority_class_name=self.priority_class_name,
            resources=ContainerResources(
                cpu_request=self.resources.cpu_request,
                memory_request=self.resources.memory_request,
                cpu_limit=self.resources.cpu_limit,
                memory_limit=self.resources.memory_limit,
            ),
        )
