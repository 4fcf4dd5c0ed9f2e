"""Stack config -> the CSI classes and their node plugin: pure checks at preview, each a
SettingsError naming the key, what is wrong and how to fix it."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BeforeValidator

from components.args import NodePluginArgs, StorageClassArgs
from components.node_plugin import NodePluginError, arguments, base_path_mounts, csi_classes
from components.node_plugin_keys import NODE_PLUGIN_KEY, NodePluginKeys
from components.stack_values import InvalidValueError, SettingsError, show
from provisioner.configuration.class_parameters import CSI_VOLUME_TYPE, VOLUME_TYPES
from provisioner.configuration.config import DEFAULT_NODE_AFFINITY_KEY, ProvisionerConfig
from provisioner.csi.driver_name import DriverNameError, driver_name_for
from provisioner.csi.options import NodePluginOptionsError, parse_node_plugin_options


def volume_type_key() -> BeforeValidator:
    """A class's `volumeType`: csi, or null for "not set"."""

    def read(value: object) -> str | None:
        if value is None or value == CSI_VOLUME_TYPE:
            return value
        if isinstance(value, str) and value.lower() in VOLUME_TYPES:
            raise InvalidValueError(
                f"must be {CSI_VOLUME_TYPE}, got {show(value)}: hostPath and local are set with"
                f" defaultVolumeType: {VOLUME_TYPES[value.lower()]} (and volumeType left out)"
            )
        raise InvalidValueError(
            f"must be {CSI_VOLUME_TYPE} (the node plugin's CSI volumes), got {show(value)};"
            " leave it out for hostPath or local volumes"
        )

    return BeforeValidator(read)


def check_csi_class(key: str, storage_class: StorageClassArgs) -> None:
    """What a CSI class cannot have beyond the runtime's parameter rules: the node plugin
    reports its node by name (NodeGetInfo's topology is kubernetes.io/hostname: a DaemonSet
    cannot give each pod another label's value), so the PVs' node affinity must use it."""
    if not storage_class.is_csi:
        return
    affinity_key = storage_class.parameters.get("nodeAffinityKey", DEFAULT_NODE_AFFINITY_KEY)
    if affinity_key != DEFAULT_NODE_AFFINITY_KEY:
        raise SettingsError(
            f"{key}.parameters.nodeAffinityKey",
            f"{show(affinity_key)}: a csi class's volumes follow their node by"
            f" {DEFAULT_NODE_AFFINITY_KEY}, the only topology the node plugin reports; drop"
            " nodeAffinityKey or the volumeType",
        )


def node_plugin_args(
    keys: NodePluginKeys | None,
    provisioner_name: str,
    classes: Sequence[StorageClassArgs],
    config: ProvisionerConfig,
) -> NodePluginArgs | None:
    """The node plugin when a class is a CSI class, checked as the plugin itself would check
    its command line; None otherwise."""
    served = csi_classes(classes)
    if not served:
        return None
    try:
        driver_name_for(provisioner_name)
    except DriverNameError as error:
        raise SettingsError(
            "provisionerName", f"a csi class needs a CSI driver named for it: {error}"
        ) from None
    plugin = (keys or NodePluginKeys()).to_args()
    try:
        directories = base_path_mounts(config, served)
    except NodePluginError as error:
        raise SettingsError("nodePathMap", str(error)) from None
    try:
        parse_node_plugin_options(arguments(plugin, provisioner_name), {"NODE_NAME": "a-node"})
    except NodePluginOptionsError as error:
        raise SettingsError(f"{NODE_PLUGIN_KEY}.kubeletDirectory", str(error)) from None
    return NodePluginArgs(
        kubelet_directory=plugin.kubelet_directory,
        image=plugin.image,
        node_selector=plugin.node_selector,
        tolerations=plugin.tolerations,
        priority_class_name=plugin.priority_class_name,
        resources=plugin.resources,
        health_port=plugin.health_port,
        base_directories=tuple(directories),
    )
