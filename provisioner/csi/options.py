"""The node plugin's command line, each flag with an environment fallback: pure.

    python -m provisioner.csi --endpoint unix:///csi/csi.sock --node-name "$NODE_NAME" \\
        --config-file /etc/config/config.json --kubelet-root /var/lib/kubelet \\
        --kubelet-registration-path /var/lib/kubelet/plugins/<driver>/csi.sock --health-port 9808
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from provisioner.configuration import defaults
from provisioner.configuration.config import DEFAULT_NODE_AFFINITY_KEY
from provisioner.csi.driver_name import DriverNameError, driver_name_for

UNIX_SCHEME = "unix://"
MAX_PORT = 65535
MAX_SOCKET_PATH_BYTES = 107
"""sockaddr_un's sun_path holds 108 bytes, the last a NUL."""
REGISTRY_DIRECTORY = "plugins_registry"
"""The kubelet's plugin watcher's directory, under its root directory."""


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
    registration_socket: Path | None
    """<kubelet root>/plugins_registry/<driver>-reg.sock; None: the plugin does not register."""
    kubelet_endpoint: Path
    """The CSI socket as the kubelet sees it (told it at registration)."""
    health_port: int | None
    """The port of /healthz; None: no HTTP endpoint."""
    manage_volumes: bool = False
    """Make and remove this node's CSI volumes' directories (provisioner.node_volumes)."""
    kubeconfig: str | None = None
    """With manage_volumes: a kubeconfig; None: in-cluster credentials (or $KUBECONFIG)."""
    state_dir: Path | None = None
    """With manage_volumes: where the volumes' locks and records live on the host."""
    shell_directory: Path | None = None
    """With manage_volumes: a busybox and its applets (`sh` among them) the scripts run with;
    None: /bin/sh and the plugin's PATH (a plugin run on the node itself). The image has no
    shell: the DaemonSet's init container copies the helper pod image's busybox there."""


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
    parser.add_argument(
        "--kubelet-root",
        default=environment.get("KUBELET_ROOT", ""),
        help="the kubelet's root directory (e.g. /var/lib/kubelet): register there, in"
        f" {REGISTRY_DIRECTORY}/; empty: do not register (env KUBELET_ROOT)",
    )
    parser.add_argument(
        "--kubelet-registration-path",
        default=environment.get("KUBELET_REGISTRATION_PATH", ""),
        help="the CSI socket's path on the node, where the kubelet reaches it (default: the"
        " --endpoint path, right when the plugin mounts that directory at the same path)"
        " (env KUBELET_REGISTRATION_PATH)",
    )
    parser.add_argument(
        "--health-port",
        default=environment.get("HEALTH_PORT", "0"),
        help="serve /healthz on this TCP port; 0: not at all (env HEALTH_PORT)",
    )
    parser.add_argument(
        "--manage-volumes",
        action="store_true",
        default=environment.get("MANAGE_VOLUMES", "") == "true",
        help="make and remove this node's CSI volumes' directories, watching its PVs (needs"
        " Kubernetes credentials) (env MANAGE_VOLUMES=true)",
    )
    parser.add_argument(
        "--kubeconfig",
        default=None,
        help="with --manage-volumes: a kubeconfig (default: $KUBECONFIG, then in-cluster)",
    )
    parser.add_argument(
        "--state-dir",
        default=environment.get("STATE_DIR", ""),
        help="with --manage-volumes: the host directory of the volumes' locks and records,"
        " shared by every plugin process of the node (default: <kubelet root>/plugins/<driver>)"
        " (env STATE_DIR)",
    )
    parser.add_argument(
        "--shell-directory",
        default=environment.get("SHELL_DIRECTORY", ""),
        help="with --manage-volumes: a directory with `sh` and the tools the setup and teardown"
        " scripts use (busybox's applets), first on their PATH (default: /bin/sh and the"
        " plugin's PATH) (env SHELL_DIRECTORY)",
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
    socket_path = Path(endpoint.removeprefix(UNIX_SCHEME))
    kubelet_endpoint = Path(arguments.kubelet_registration_path or socket_path)
    if not kubelet_endpoint.is_absolute():
        raise NodePluginOptionsError(
            f"--kubelet-registration-path {str(kubelet_endpoint)!r} must be an absolute path:"
            " the kubelet dials it as given"
        )
    kubelet_root: str = arguments.kubelet_root
    if kubelet_root and not Path(kubelet_root).is_absolute():
        raise NodePluginOptionsError(
            f"--kubelet-root {kubelet_root!r} must be an absolute path, e.g. /var/lib/kubelet"
        )
    registration_socket = (
        Path(kubelet_root) / REGISTRY_DIRECTORY / f"{driver_name}-reg.sock"
        if kubelet_root
        else None
    )
    for flag, path in (("--endpoint", socket_path), ("--kubelet-root", registration_socket)):
        if path is not None and len(os.fsencode(path)) > MAX_SOCKET_PATH_BYTES:
            raise NodePluginOptionsError(
                f"{flag}: the socket {path} is longer than a unix socket's path may be"
                f" ({MAX_SOCKET_PATH_BYTES} bytes): choose a shorter directory"
            )
    manage_volumes: bool = arguments.manage_volumes
    state_dir = _state_dir(arguments.state_dir, kubelet_root, driver_name, manage_volumes)
    return NodePluginOptions(
        socket_path=socket_path,
        driver_name=driver_name,
        node_name=node_name,
        config_file=Path(arguments.config_file),
        topology_key=key,
        topology_value=value,
        registration_socket=registration_socket,
        kubelet_endpoint=kubelet_endpoint,
        health_port=_health_port(arguments.health_port),
        manage_volumes=manage_volumes,
        kubeconfig=arguments.kubeconfig,
        state_dir=state_dir,
        shell_directory=_shell_directory(arguments.shell_directory),
    )


def _shell_directory(given: str) -> Path | None:
    if not given:
        return None
    if not Path(given).is_absolute():
        raise NodePluginOptionsError(f"--shell-directory {given!r} must be an absolute path")
    return Path(given)


def _state_dir(given: str, kubelet_root: str, driver_name: str, manage: bool) -> Path | None:
    if not manage:
        return None
    if given:
        if not Path(given).is_absolute():
            raise NodePluginOptionsError(f"--state-dir {given!r} must be an absolute path")
        return Path(given)
    if kubelet_root:
        return Path(kubelet_root) / "plugins" / driver_name
    raise NodePluginOptionsError(
        "--manage-volumes needs --state-dir or --kubelet-root: the volumes' locks must live on"
        " the host, where every plugin process of the node sees them"
    )


def _health_port(text: str) -> int | None:
    port = int(text) if text.isdigit() else -1
    if not 0 <= port <= MAX_PORT:
        raise NodePluginOptionsError(
            f"--health-port {text!r} must be a TCP port number (1-{MAX_PORT}), or 0 for none"
        )
    return port or None
