"""One local Kubernetes cluster: start it, use it, stop it, leaving nothing behind.

Why: the provisioner must be tested against the real control plane, with fake nodes (kwok),
helper pods that really run, and its own Deployment's pods really running. This ties the parts
together: certificates and kubeconfigs, the component processes, the nodes and their
directories, the helper-pod runner and the image-table runner; it reports the start-up time,
and stops everything by PID (also at interpreter exit and on SIGTERM/SIGHUP).
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import urllib3
from kubernetes.client.exceptions import ApiException

from localcluster import kubeconfig, shutdown
from localcluster.binaries import locate_binaries
from localcluster.certificates import ClusterPki, generate_pki
from localcluster.cluster_access import ClusterAccess, wait_for
from localcluster.cluster_dirs import make_cluster_dir, remove_abandoned_cluster_dirs
from localcluster.component_args import ClusterLayout, ClusterPorts
from localcluster.control_plane import ControlPlane
from localcluster.errors import ClusterError, ComponentFailedError, PortInUseError
from localcluster.event_log import EventLog
from localcluster.helper_runner import HelperPodRunner
from localcluster.image_pod_plan import RestartBackoff
from localcluster.image_pod_runner import ImagePodRunner
from localcluster.image_root import image_runtime
from localcluster.image_table import PROVISIONER_IMAGE_REPOSITORY, ImageRuntime, ImageTable
from localcluster.kwok_stages import write_stages
from localcluster.node_binaries import locate_node_binaries
from localcluster.nodes import (
    NodeSpec,
    create_node,
    default_node_specs,
    delete_node,
    wait_until_usable,
)
from localcluster.pod_start import FAST, PodStartModel
from localcluster.ports import ensure_port_free, pick_free_ports
from localcluster.raw_api import call_json
from localcluster.real_nodes import RealNodes
from localcluster.snapshot_controller import SnapshotController, locate_snapshot_tools
from scripts import build_image

DEFAULT_STARTUP_TIMEOUT_SECONDS = 120.0


@dataclass(frozen=True)
class ClusterOptions:
    """How to start a cluster; the defaults suit tests."""

    nodes: Sequence[NodeSpec] = field(default_factory=default_node_specs)
    apiserver_port: int | None = None
    """A fixed port for kube-apiserver; None picks a free one."""
    parent_dir: Path | None = None
    """Where the cluster's temporary directory is made (default: the system temp dir)."""
    startup_timeout_seconds: float = DEFAULT_STARTUP_TIMEOUT_SECONDS
    announce: bool = True
    """Print "cluster ready in X.Xs" to stderr once ready."""
    provisioner_image: Path | None = None
    """The provisioner's built image (the directory `python -m scripts.build_image --path`
    prints), run for `local-path-storage/provisioner`; None builds or reuses the cached image
    of this checkout's tracked files."""
    images: Mapping[str, ImageRuntime] = field(default_factory=dict)
    """More image-table entries (image repository -> runtime), added to the provisioner's
    image (or replacing it); see image_table.py."""
    restart_backoff: RestartBackoff = field(default_factory=RestartBackoff)
    """The crash-loop back-off of image-table pods (kubelet: 10 s doubling to 300 s)."""
    pod_start: PodStartModel = FAST
    """Time a kubelet would take to start a helper pod (pod_start.py); none by default."""
    real_nodes: int = 0
    """Real nodes real-1..real-N beside the kwok nodes: a kubelet and containerd each, every
    image pulled from a local registry (real_nodes.py). Needs root, `make test-real-node`'s
    builds and packages, and no other cluster with real nodes on the machine."""
    snapshots: bool = False
    """Serve the snapshot API: the VolumeSnapshot CRDs and the ReferenceGrant CRD, applied and
    Established, and the common snapshot controller running (snapshot_controller.py). Needs
    `scripts/build-go-tools.sh snapshot-controller`; off, the cluster has none of it."""


def provisioner_runtime(options: ClusterOptions) -> ImageRuntime | None:
    """The provisioner's image, unpacked, unless an extra entry replaces it."""
    if PROVISIONER_IMAGE_REPOSITORY in options.images:
        return None
    directory = options.provisioner_image
    if directory is None:
        try:
            directory = build_image.image().directory
        except build_image.ImageBuildError as error:
            raise ClusterError(f"localcluster: no provisioner image: {error}") from error
    return image_runtime(directory)


class LocalCluster(ClusterAccess):
    """A running local cluster. Use `LocalCluster.start()` or `with LocalCluster.start() as c`."""

    def __init__(
        self,
        options: ClusterOptions,
        layout: ClusterLayout,
        ports: ClusterPorts,
        pki: ClusterPki,
        provisioner: ImageRuntime | None = None,
    ) -> None:
        super().__init__(
            f"https://127.0.0.1:{ports.apiserver}", pki.ca.cert, pki.admin, layout.root
        )
        self.options = options
        self.layout = layout
        self.ports = ports
        self.pki = pki
        self.kubeconfig = layout.admin_kubeconfig
        self.nodes: list[str] = []
        self.startup_seconds = 0.0
        self.harness_log = EventLog(layout.logs / "harness.log")
        self.control_plane = ControlPlane(
            locate_binaries(), layout, ports, pki, fake_nodes_only=options.real_nodes > 0
        )
        self.real = (
            RealNodes(options.real_nodes, locate_node_binaries(), layout.root, layout.logs)
            if options.real_nodes > 0
            else None
        )
        self.runner = HelperPodRunner(
            self.admin_client,
            layout.root,
            self.node_dir,
            self.harness_log,
            pod_start=options.pod_start,
        )
        self.image_table = ImageTable(options.images, provisioner)
        self.image_runner = ImagePodRunner(
            self.admin_client,
            layout.root,
            self.node_dir,
            self.harness_log,
            table=self.image_table,
            api_port=ports.apiserver,
            backoff=options.restart_backoff,
        )
        self.snapshots: SnapshotController | None = None
        self._stopped = False
        self._components_lock = threading.Lock()

    @classmethod
    def start(cls, options: ClusterOptions | None = None) -> LocalCluster:
        """Starts a cluster and waits until it is usable; raises ClusterError (one line) and
        leaves nothing running when it cannot."""
        options = options or ClusterOptions()
        locate_binaries()  # fail before making anything when binaries are missing
        if options.real_nodes > 0:
            locate_node_binaries()
            RealNodes.claim_host()
        if options.snapshots:
            locate_snapshot_tools()
        # Before the clock starts: a first build of the image is not the cluster's start-up.
        provisioner = provisioner_runtime(options)
        started = time.monotonic()
        if options.apiserver_port is not None:
            ensure_port_free(options.apiserver_port, "kube-apiserver")
        etcd_client, etcd_peer, apiserver = pick_free_ports(3)
        ports = ClusterPorts(etcd_client, etcd_peer, options.apiserver_port or apiserver)
        remove_abandoned_cluster_dirs(options.parent_dir)
        root = make_cluster_dir(options.parent_dir)
        layout = ClusterLayout(root)
        try:
            pki = generate_pki(layout.pki)
            cluster = cls(options, layout, ports, pki, provisioner)
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise
        shutdown.register(cluster)
        try:
            cluster._boot(started)
        except BaseException as error:
            # Keep the logs when the one-line error points into them.
            names_a_log = isinstance(error, ClusterError) and not isinstance(error, PortInUseError)
            cluster.stop(keep_logs=names_a_log)
            raise
        return cluster

    def _boot(self, started: float) -> None:
        try:
            self._boot_steps(started)
        except (ApiException, urllib3.exceptions.HTTPError) as error:
            # An API call failed: most likely because a component died; say which one.
            self.control_plane.check_alive()
            first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise ClusterError(
                f"localcluster: start-up failed: {first_line}; see {self.layout.logs}"
            ) from error

    def _boot_steps(self, started: float) -> None:
        deadline = started + self.options.startup_timeout_seconds
        self._write_configuration()
        if self.real is not None:
            self.real.prepare_host(self.ports.apiserver)
        self.control_plane.start_storage_and_apiserver(deadline)
        self.control_plane.start_controllers()
        if self.options.snapshots:
            self.enable_snapshots(max(1.0, deadline - time.monotonic()))
        if self.real is not None:
            begun = time.monotonic()
            self.real.start_registry(self._provisioner_image_directory())
            pushed = time.monotonic()
            self.real.start_nodes(self.server, self.pki.ca, deadline)
            self.harness_log.write(
                f"real nodes: registry and images in {pushed - begun:.1f}s, "
                f"containerd up and kubelets started in {time.monotonic() - pushed:.1f}s"
            )
            self.nodes.extend(self.real.names)
        for spec in self.options.nodes:
            self._create_node(spec)
        self.runner.start()
        self.image_runner.start()
        core = self.core_v1()
        pending = wait_until_usable(core, self.nodes, deadline, self._check_alive)
        if pending:
            kubelet = self.real.kubelet_of(pending[0]) if self.real is not None else None
            raise ComponentFailedError(
                kubelet.name if kubelet else "kwok",
                f"did not make node {pending[0]} Ready in time",
                kubelet.log_path if kubelet else self.control_plane.kwok.log_path,
            )
        self._wait_for_token_controller(deadline)
        self.startup_seconds = time.monotonic() - started
        self.harness_log.write(f"cluster ready in {self.startup_seconds:.1f}s")
        threading.Thread(
            target=self._watch_components, name="localcluster-watchdog", daemon=True
        ).start()
        if self.options.announce:
            print(
                f"localcluster: cluster ready in {self.startup_seconds:.1f}s ({self.dir})",
                file=sys.stderr,
            )

    def _check_alive(self) -> None:
        self.control_plane.check_alive()
        if self.snapshots is not None:
            self.snapshots.check_alive()
        if self.real is not None:
            self.real.check_alive()

    def _provisioner_image_directory(self) -> Path:
        """The provisioner image the real nodes pull: the one the options name, else this
        checkout's (cached, built if missing)."""
        if self.options.provisioner_image is not None:
            return self.options.provisioner_image
        try:
            return build_image.image().directory
        except build_image.ImageBuildError as error:
            raise ClusterError(f"localcluster: no provisioner image: {error}") from error

    def _write_configuration(self) -> None:
        ca_pem = self.pki.ca.cert_pem()
        identities = {
            "kube-controller-manager": self.pki.controller_manager,
            "kube-scheduler": self.pki.scheduler,
            "kwok": self.pki.kwok,
        }
        for component, pair in identities.items():
            document = kubeconfig.build_kubeconfig(
                self.server,
                ca_pem,
                component,
                client_cert_pem=pair.cert_pem(),
                client_key_pem=pair.key_pem(),
            )
            kubeconfig.write_kubeconfig(self.layout.component_kubeconfig(component), document)
        admin = kubeconfig.build_kubeconfig(
            self.server,
            ca_pem,
            "admin",
            client_cert_pem=self.admin.cert_pem(),
            client_key_pem=self.admin.key_pem(),
        )
        kubeconfig.write_kubeconfig(self.kubeconfig, admin)
        write_stages(self.layout.kwok_stages, self.image_table.repositories)
        self.layout.nodes.mkdir(parents=True, exist_ok=True)

    def _wait_for_token_controller(self, deadline: float) -> None:
        """The controller-manager is working once it has made `default/default`."""
        core = self.core_v1()

        def default_account() -> bool | None:
            self.control_plane.check_alive()
            accounts = call_json(core.list_namespaced_service_account, "default")["items"]
            names = {account["metadata"]["name"] for account in accounts}
            return True if "default" in names else None

        try:
            wait_for(
                default_account, max(0.0, deadline - time.monotonic()), "default service account"
            )
        except TimeoutError as error:
            raise ComponentFailedError(
                "kube-controller-manager",
                "did not create the default service account in time",
                self.control_plane.controller_manager.log_path,
            ) from error

    def _watch_components(self) -> None:
        """Says once, on stderr, when a component dies while the cluster is in use."""
        reported: set[int] = set()
        while not self._stopped:
            time.sleep(1.0)
            with self._components_lock:
                real = self.real.processes() if self.real is not None else []
                extra = [self.snapshots.process] if self.snapshots is not None else []
                for process in [*self.control_plane.processes, *extra, *real]:
                    if self._stopped or process.pid in reported or process.is_running():
                        continue
                    reported.add(process.pid or 0)
                    problem = f"exited (exit code {process.exit_code()})"
                    failure = (
                        ComponentFailedError(process.name, problem, process.log_path)
                        if process in real
                        else self.control_plane.failure(process, problem)
                    )
                    line = str(failure)
                    self.harness_log.write(line)
                    print(line, file=sys.stderr)

    # Nodes.
    def node_dir(self, node: str) -> Path:
        """The directory standing for `node`'s disk: hostPath /x is `node_dir(node) / "x"`."""
        return self.layout.nodes / node

    def _create_node(self, spec: NodeSpec) -> None:
        self.node_dir(spec.name).mkdir(parents=True, exist_ok=True)
        create_node(self.core_v1(), spec)
        self.nodes.append(spec.name)

    def add_node(
        self, name: str, labels: Mapping[str, str] | None = None, timeout: float = 60.0
    ) -> None:
        """Creates another fake node and waits until it is Ready and schedulable."""
        self._create_node(NodeSpec(name, dict(labels or {})))
        pending = wait_until_usable(
            self.core_v1(), [name], time.monotonic() + timeout, self.control_plane.check_alive
        )
        if pending:
            raise ComponentFailedError(
                "kwok", f"did not make node {name} Ready in time", self.control_plane.kwok.log_path
            )

    def delete_node(self, name: str) -> None:
        """Deletes the Node object (its directory stays, as a dead node's disk would)."""
        delete_node(self.core_v1(), name)
        if name in self.nodes:
            self.nodes.remove(name)

    # Control plane.
    def enable_snapshots(self, timeout: float = 60.0) -> None:
        """Serves the snapshot API from now on (what `ClusterOptions.snapshots` does at start):
        applies the snapshot and ReferenceGrant CRDs, waits until they are Established and
        starts the common snapshot controller. A second call does nothing."""
        with self._components_lock:
            if self.snapshots is not None:
                return
            begun = time.monotonic()
            controller = SnapshotController(
                locate_snapshot_tools(), self.kubeconfig, self.layout.logs
            )
            controller.start(self.admin_client, timeout)
            self.snapshots = controller
            self.harness_log.write(
                f"snapshot CRDs Established and snapshot-controller started "
                f"(pid {controller.process.pid}) in {time.monotonic() - begun:.2f}s"
            )

    def restart_apiserver(self) -> None:
        """Stops kube-apiserver and starts it again on the same port with the same etcd data."""
        with self._components_lock:
            self.control_plane.restart_apiserver(
                time.monotonic() + self.options.startup_timeout_seconds
            )

    def pids(self) -> list[int]:
        """Every process this cluster started: components, helper-pod sandboxes, and the
        containers and pause processes of image-table pods."""
        return (
            self.control_plane.pids()
            + (
                [self.snapshots.process.pid]
                if self.snapshots and self.snapshots.process.pid
                else []
            )
            + list(self.runner.started_pids)
            + list(self.image_runner.started_pids)
            + (self.real.pids() if self.real is not None else [])
        )

    # Stopping.
    def stop(self, keep_logs: bool = False) -> None:
        """Stops the runner and every component by PID and removes the cluster directory
        (except `logs/` when `keep_logs`). Safe to call more than once."""
        if self._stopped:
            return
        self._stopped = True
        try:
            self.image_runner.stop()
            self.runner.stop()
        finally:
            with self._components_lock:  # the watchdog must not mistake this for a crash
                try:
                    if self.snapshots is not None:
                        self.snapshots.stop()  # a client of the API: before the API goes
                    self._stop_real_nodes()
                finally:
                    self.control_plane.stop()
            self.close()
            shutdown.unregister(self)
            self._remove_directory(keep_logs)

    def _stop_real_nodes(self) -> None:
        """Real nodes stop first (their kubelets would otherwise log the API going away), and
        every host change is undone; an undo that failed is said on stderr, never hidden."""
        if self.real is None:
            return
        for problem in self.real.stop():
            line = f"localcluster: could not undo a host change: {problem}"
            self.harness_log.write(line)
            print(line, file=sys.stderr)

    def _remove_directory(self, keep_logs: bool) -> None:
        if not keep_logs:
            shutil.rmtree(self.dir, ignore_errors=True)
            return
        for child in self.dir.iterdir():
            if child != self.layout.logs:
                if child.is_dir():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink(missing_ok=True)

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()
