"""The node plugin's process: reads config.json, serves Identity and Node on the unix socket,
then (when given a kubelet root) the kubelet's Registration in its plugin registry directory,
and (when given a port) /healthz, until SIGTERM or SIGINT; then it stops taking calls, lets
those running finish, and removes the registration socket first so the kubelet stops using
the driver before its socket goes."""

from __future__ import annotations

import logging
import os
import signal
import stat
import threading
from concurrent import futures
from pathlib import Path
from types import FrameType
from typing import Protocol

import grpc
from prometheus_client import CollectorRegistry

from provisioner.configuration.config import BasePathRules, parse_config_json
from provisioner.configuration.config_error import ConfigError
from provisioner.csi.identity_server import IdentityServer
from provisioner.csi.liveness import Liveness
from provisioner.csi.node_paths import node_base_paths
from provisioner.csi.node_server import NodeServer, VolumeSetups
from provisioner.csi.options import NodePluginOptions
from provisioner.csi.registration_server import RegistrationServer
from provisioner.csi.services import (
    ControllerService,
    controller_handler,
    identity_handler,
    node_handler,
    registration_handler,
)
from provisioner.process.server import ProbeServer

log = logging.getLogger(__name__)

WORKERS = 4
STOP_GRACE_SECONDS = 10.0


class NodePluginError(Exception):
    """The plugin cannot start; the message says what and how to fix it."""


def load_base_paths(options: NodePluginOptions) -> dict[str, BasePathRules]:
    try:
        text = options.config_file.read_text(encoding="utf-8")
    except OSError as error:
        raise NodePluginError(
            f"cannot read config.json at {options.config_file}: {error.strerror}: mount the"
            " provisioner's ConfigMap there or pass --config-file"
        ) from None
    try:
        config = parse_config_json(text)
    except ConfigError as error:
        raise NodePluginError(f"{options.config_file}: {error}") from None
    return node_base_paths(config, options.node_name)


def start_server(socket_path: Path, handlers: list[grpc.GenericRpcHandler]) -> grpc.Server:
    """Listening on `socket_path` (a stale socket of a previous run replaced), readable and
    writable by root only: whoever can call Publish can mount a volume anywhere, and whoever
    can call NotifyRegistrationStatus can make the plugin restart."""
    try:
        socket_path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise NodePluginError(
            f"cannot make the socket's directory {socket_path.parent}: {error.strerror}: check"
            " the path (--endpoint, --kubelet-root) and the mounts"
        ) from None
    try:
        if stat.S_ISSOCK(socket_path.lstat().st_mode):
            socket_path.unlink()
    except FileNotFoundError:
        pass
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="csi"),
        handlers=handlers,
    )
    # Made with no access for group and others from the start, not narrowed after.
    previous = os.umask(0o077)
    try:
        if server.add_insecure_port(f"unix://{socket_path}") == 0:
            raise RuntimeError("the port was not bound")
        server.start()
    except RuntimeError as error:
        raise NodePluginError(f"cannot listen on {socket_path}: {error}") from None
    finally:
        os.umask(previous)
    return server


class ManagedVolumes(VolumeSetups, Protocol):
    """The node's volume manager (--manage-volumes), started before `run`, stopped by it."""

    def stop(self) -> None: ...


def run(
    options: NodePluginOptions,
    volumes: ManagedVolumes | None = None,
    controller: ControllerService | None = None,
) -> int:
    base_paths = load_base_paths(options)
    if not base_paths:
        log.warning(
            "config.json gives node %s no base path: every publish will be refused",
            options.node_name,
        )
    registration = RegistrationServer(options.driver_name, options.kubelet_endpoint)
    # First, so that a port already taken stops the plugin before any socket is made.
    health = start_health(options, Liveness(options.socket_path, registration))
    identity = IdentityServer(options.driver_name)
    node = NodeServer(
        options.node_name,
        base_paths,
        {options.topology_key: options.topology_value},
        volume_setups=volumes,
    )
    handlers = [identity_handler(identity), node_handler(node)]
    if controller is not None:
        # Snapshots only; the Identity keeps not advertising a Controller service, so that
        # nothing in a cluster expects volume calls of it (services.py).
        handlers.append(controller_handler(controller))
    server = start_server(options.socket_path, handlers)
    log.info(
        "CSI node plugin %s serving on %s for node %s, base paths %s",
        options.driver_name,
        options.socket_path,
        options.node_name,
        ", ".join(base_paths) or "(none)",
    )
    # Only once the CSI socket answers: the kubelet calls NodeGetInfo right after GetInfo.
    registrar = None
    if options.registration_socket is not None:
        registrar = start_server(options.registration_socket, [registration_handler(registration)])
        log.info(
            "registering with the kubelet on %s (CSI endpoint %s)",
            options.registration_socket,
            options.kubelet_endpoint,
        )
    stopping = threading.Event()

    def on_signal(number: int, _: FrameType | None) -> None:
        log.info("received %s", signal.Signals(number).name)
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    stopping.wait()
    if registrar is not None:
        registrar.stop(STOP_GRACE_SECONDS).wait()
    server.stop(STOP_GRACE_SECONDS).wait()
    if volumes is not None:
        volumes.stop()
    if health is not None:
        health.stop()
    return 0


def start_health(options: NodePluginOptions, liveness: Liveness) -> ProbeServer | None:
    """/healthz on the port given: alive and ready are the same question for the plugin."""
    if options.health_port is None:
        return None
    try:
        health = ProbeServer(
            "", options.health_port, CollectorRegistry(), liveness, liveness=liveness
        )
    except OSError as error:
        raise NodePluginError(
            f"cannot serve /healthz on port {options.health_port}: {error.strerror}: pick a free"
            " port with --health-port"
        ) from None
    health.start()
    return health
