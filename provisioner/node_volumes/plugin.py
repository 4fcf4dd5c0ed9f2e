"""Starts the node plugin's volume manager (--manage-volumes): the ConfigMap's files beside
config.json (the setup and teardown scripts in force, as a helper pod gets them), this node's
base paths, the state directory on the host, a client with the plugin's credentials, the
watch of this node's PVs and, beside it, the watch of this node's VolumeSnapshotContents with
the CSI Controller's snapshot calls over the same SnapshotService."""

from __future__ import annotations

import logging

from provisioner.configuration.config import load_config_directory
from provisioner.configuration.config_error import ConfigError
from provisioner.csi.node_paths import node_base_paths
from provisioner.csi.options import NodePluginOptions
from provisioner.csi.server import NodePluginError
from provisioner.csi.services import ControllerService
from provisioner.kube.client import DEFAULT_USER_AGENT, KubeConfigError, create_clients
from provisioner.node_volumes.snapshot_rpcs import SnapshotRpcs
from provisioner.node_volumes.snapshot_service import SnapshotService
from provisioner.node_volumes.snapshot_watch import ClusterSourceVolumes, NodeSnapshots
from provisioner.node_volumes.step_runner import Shell, sandbox_problem
from provisioner.node_volumes.volume_executor import VolumeExecutor
from provisioner.node_volumes.volume_state import VolumeState
from provisioner.node_volumes.volume_watch import NodeVolumes

log = logging.getLogger(__name__)

QPS = 20.0
BURST = 40
CONNECTIONS = 4
"""One watch and a few requests at a time: a node plugin's share of the API server is small.
Each volume it removes costs two requests (the PV read afresh, then marked); at client-go's
5 a second after 10 at once, a node releasing 20 volumes together took 6 s for those alone,
longer than the release they are part of. A burst of 40 lets a node's usual batch through at
once; the kubelet itself runs at 50 a second after 100."""


class NodeManager:
    """The node's volume and snapshot watches, started and stopped together, and the
    Controller service over its snapshots (server.run binds it)."""

    def __init__(self, volumes: NodeVolumes, snapshots: NodeSnapshots) -> None:
        self.volumes = volumes
        self.snapshots = snapshots
        self.controller: ControllerService = SnapshotRpcs(
            snapshots.service, ClusterSourceVolumes(volumes), snapshots
        )

    def ensure_set_up(self, volume_id: str, path: str) -> None:
        self.volumes.ensure_set_up(volume_id, path)

    def stop(self) -> None:
        self.snapshots.stop()
        self.volumes.stop()


def start_node_volumes(options: NodePluginOptions) -> NodeManager:
    if options.state_dir is None:
        raise NodePluginError("--manage-volumes needs a state directory (--state-dir)")
    # Fail closed: no volume step runs unconfined (sandbox.py), so no plugin starts without it.
    if (problem := sandbox_problem()) is not None:
        raise NodePluginError(problem)
    try:
        bundle = load_config_directory(options.config_file.parent, config_file=options.config_file)
    except ConfigError as error:
        raise NodePluginError(f"{options.config_file.parent}: {error}") from None
    try:
        state = VolumeState(options.state_dir)
    except OSError as error:
        raise NodePluginError(
            f"cannot make the state directory {options.state_dir}: {error.strerror}: mount a"
            " host directory there (--state-dir)"
        ) from None
    try:
        clients = create_clients(
            options.kubeconfig,
            qps=QPS,
            burst=BURST,
            user_agent=f"{DEFAULT_USER_AGENT} csi-node/{options.node_name}",
            connection_pool_size=CONNECTIONS,
        )
    except KubeConfigError as error:
        raise NodePluginError(str(error)) from None
    executor = VolumeExecutor(
        options.node_name,
        bundle,
        node_base_paths(bundle.config, options.node_name),
        state,
        shell=Shell(str(options.shell_directory) if options.shell_directory else None),
    )
    volumes = NodeVolumes(clients, executor, options.driver_name)
    service = SnapshotService(
        options.node_name,
        executor.base_paths,
        state,
        timeout_seconds=executor.timeout,
        shell=executor.shell,
    )
    snapshots = NodeSnapshots(clients, service, options.driver_name)
    volumes.start()
    snapshots.start()
    log.info("managing node %s's CSI volumes (state in %s)", options.node_name, options.state_dir)
    return NodeManager(volumes, snapshots)
