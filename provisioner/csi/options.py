"""The node plugin's command line, each flag with an environment fallback: pure.

    python -m provisioner.csi --endpoint unix:///csi/csi.sock --node-name "$NODE_NAME" \\
        --config-file /etc/config/config.json
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from provisioner.configuration import defaults
from provisioner.configuration.config import DEFAULT_NODE_AFFINITY_KEY
from provisioner.csi.driver_name import DriverNameError, driver_name_for

UNIX_SCHEME = "unix://"


class NodePluginOptionsError(ValueError):
    """A command line the plugin refuses (printed; exit status 2)."""


@dataclass(frozen=True)
class NodePluginOptions:
    socket_path: Path
    driver_name: str
    node_name: str
    config_file: Path
    topology_key: str
    topology_value: str


def parse_node_plugin_options(
    argv: Sequence[str], environment: Mapping[str, str]
) -> NodePluginOptions:
    parser = argparse.ArgumentParser(
        prog="python -m provisioner.csi", description="The CSI node plugin (Identity, Node)."
    )
    parser.add_argument(
        "--endpoint",
        default=environment.get("CSI_ENDPOINT", "unix:///csi/csi.sock"),
        help="unix:///path of the socket to serve (env CSI_ENDPOINT)",
    )
    parser.add_argument(
        "--provisioner-name",
        default=environment.get("PROVISIONER_NAME", defaults.PROVISIONER_NAME),
        help="the provisioner's name; the driver name is derived from it (domain/name ->"
        " name.domain) (env PROVISIONER_NAME)",
    )
    parser.add_argument(
        "--node-name",
        default=environment.get("NODE_NAME", ""),
        help="this node's name, the CSI node ID (env NODE_NAME)",
    )
    parser.add_argument(
        "--config-file",
        default=environment.get("CONFIG_PATH", "/etc/config/config.json"),
        help="config.json, for this node's base paths (env CONFIG_PATH)",
    )
    parser.add_argument(
        "--topology-key",
        default=environment.get("TOPOLOGY_KEY", DEFAULT_NODE_AFFINITY_KEY),
        help="the node label the PVs' node affinity uses (the classes' nodeAffinityKey)",
    )
    parser.add_argument(
        "--topology-value",
        default=environment.get("TOPOLOGY_VALUE", ""),
        help="this node's value of that label (default for kubernetes.io/hostname: the node name)",
    )
    arguments = parser.parse_args(list(argv))
    endpoint: str = arguments.endpoint
    if not endpoint.startswith(UNIX_SCHEME) or len(endpoint) == len(UNIX_SCHEME):
        raise NodePluginOptionsError(f"--endpoint {endpoint!r} must be unix:///absolute/path.sock")
    node_name: str = arguments.node_name
    if not node_name:
        raise NodePluginOptionsError(
            "--node-name (or NODE_NAME) is required: give the pod spec.nodeName through the"
            " downward API"
        )
    key: str = arguments.topology_key
    value: str = arguments.topology_value or (node_name if key == DEFAULT_NODE_AFFINITY_KEY else "")
    if not value:
        raise NodePluginOptionsError(
            f"--topology-value is required with --topology-key {key}: give this node's value of"
            " that label (only kubernetes.io/hostname defaults to the node name)"
        )
    try:
        driver_name = driver_name_for(arguments.provisioner_name)
    except DriverNameError as error:
        raise NodePluginOptionsError(str(error)) from None
    return NodePluginOptions(
        socket_path=Path(endpoint.removeprefix(UNIX_SCHEME)),
        driver_name=driver_name,
        node_name=node_name,
        config_file=Path(arguments.config_file),
        topology_key=key,
        topology_value=value,
    )
