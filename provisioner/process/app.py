"""The process: config, API client, probes, leader election, controller, graceful shutdown.

Only the leader watches and works; other replicas stay alive, report ready (so a rolling update
never stalls on a standby) and campaign for the lease. Losing the lease ends the process with
exit code 1, as client-go's leader election does, so the kubelet restarts it as a fresh standby
rather than letting two replicas work at once: no later than --leader-election-renew-deadline
after its last successful renewal, whatever the API server does meanwhile (hangs, throttles,
resets), so before any standby may take over. SIGTERM stops taking work, lets running
reconciles finish (bounded: `STOP_BUDGET_SECONDS`, below the Deployment's
terminationGracePeriodSeconds, so the lease is released before any SIGKILL), releases the lease
so a standby takes over at once, and exits 0. A lost lease is not a shutdown: the process exits 1
at once, without draining (and during a drain too), as client-go does, because another replica
is already working or about to, and deletes the helper pods this one's workers follow. A
controller that cannot start or sync exits 1 too, and /healthz fails when the election, the
informers or the work loop wedge.

An invalid config at start-up does not end the process (as a Deployment that would be a crash
loop hiding the reason): it stays alive and not ready, /readyz and an InvalidConfig Warning on
the ConfigMap name the key at fault, and it neither campaigns for the lease nor works until the
config watcher loads a valid version, so a replica with a good config keeps leading meanwhile.
Invalid flags and an unusable kubeconfig still exit 2: no ConfigMap edit can fix those.

A provisioner that takes over another (`--predecessor-selector`) works only once the
predecessor's pods are gone, and exits 1 at once, without draining, when one appears while it
leads (a Warning on that pod says what to do): the replica that leads next waits for it again.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from types import FrameType
from typing import Any

from provisioner.configuration.config import ConfigBundle, ConfigError
from provisioner.configuration.config_watch import ConfigWatcher
from provisioner.configuration.options import Options
from provisioner.csi.driver_name import driver_name_for
from provisioner.helper_pods.pod_runner import kubelet_deadline_wait
from provisioner.helper_pods.pod_shapes import helper_grace_seconds
from provisioner.helper_pods.pods import POD_CLEANUP_SECONDS, BatchSettings, PodSettings
from provisioner.kube.client import (
    EventRecorder,
    KubeClients,
    KubeConfigError,
    ObjectReference,
    create_clients,
)
from provisioner.kube.informer import Informer
from provisioner.kube.leader_election import LeaderElectionConfig, LeaderElector, lease_name_for
from provisioner.kube.lease_watch import lease_watch
from provisioner.kube.metrics import Metrics
from provisioner.loop.controller import (
    DRAIN_SECONDS,
    INFORMER_STOP_SECONDS,
    Controller,
    ControllerSettings,
    Key,
    WorkQueue,
)
from provisioner.process.api_reachability import ApiReachability
from provisioner.process.installation_removal import release_finalizers, removal_reason
from provisioner.process.logs import configure_logging
from provisioner.process.predecessor_watch import PredecessorWatch
from provisioner.process.predecessors import PredecessorPod
from provisioner.process.server import ProbeServer
from provisioner.provisioning.actions import Actions
from provisioner.provisioning.local_path_provisioner import LocalPathProvisioner
from provisioner.provisioning.local_path_watches import (
    WATCHED_INFORMERS,
    LocalPathWatches,
    watched_caches,
)
from provisioner.provisioning.removals import SoleInstance
from provisioner.provisioning.snapshots import contents_informer, snapshot_api_served
from provisioner.provisioning.work_keys import CLAIM, EXPANSION, HELPER_POD, VOLUME
from provisioner.scans.node_scan import NodeScanner

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_LOST_LEADERSHIP = 1
EXIT_CONTROLLER_FAILED = 1
EXIT_PREDECESSOR_RETURNED = 1
EXIT_BAD_SETUP = 2
LEASE_RELEASE_SECONDS = 5.0
FINALIZER_RELEASE_SECONDS = 10.0
"""When the installation is being removed: checking that, and taking our finalizer off our PVs."""
PREDECESSOR_WARNING_SECONDS = 5.0
"""How long a leader that stops for a predecessor's pod tries to send the Warning about it."""
CONTROLLER_STOP_BUDGET = (
    DRAIN_SECONDS + POD_CLEANUP_SECONDS + WATCHED_INFORMERS * INFORMER_STOP_SECONDS
)
"""The controller's whole stop: the drain, deleting the helper pods still running, and the
informers."""
STOP_BUDGET_SECONDS = (
    CONTROLLER_STOP_BUDGET + LEASE_RELEASE_SECONDS + FINALIZER_RELEASE_SECONDS + 2.0
)
"""SIGTERM to exit, at most (the rest of the stop is closing sockets)."""
STARTUP_SETTLE_SECONDS = 5.0
"""At start, how long the probes' first answers may wait for the informers' first sync: with
the process's own start before it, well below the startup probe's timeout (components/
deployment.py, 10 s), so that a waiting probe is answered, never timed out; a longer sync (a
very large cluster) then shows as syncing."""
CAPACITY_MIN_INTERVAL_SECONDS = 1.0
"""The CSIStorageCapacity publisher writes at most once per this many seconds."""
STALL_MARGIN_SECONDS = 120.0
"""Beyond two helper runs (setup and its cleanup, each cmdTimeoutSeconds at most, and then the
time its kubelet takes to stop it): PV saves with their retries and API calls. A worker on one
key for longer is wedged."""


class Provisioner:
    def __init__(self, options: Options) -> None:
        self.options = options
        self.metrics = Metrics()
        # First: the port listens from here on, and a kubelet probe sent while the rest starts
        # waits for its answer (`run` serves once the caches are warm) instead of being
        # refused and logged as a failed probe.
        self.server = ProbeServer(
            options.metrics_address,
            options.metrics_port,
            self.metrics.registry,
            self.readiness,
            liveness=self.liveness,
        )
        self._stopping = threading.Event()
        self._exit_code = EXIT_OK
        self._leading = threading.Event()
        self._began = threading.Event()
        self._begin_lock = threading.RLock()  # stop() may run in a signal handler mid-_begin
        self.watcher = ConfigWatcher(
            options.config_path,
            options.helper_pod_file,
            allow_unsafe_helper_template=options.allow_unsafe_helper_template,
            on_reloaded=self._config_reloaded,
            on_invalid=self._config_refused,
        )
        self.clients = create_clients(
            options.kubeconfig, qps=options.kube_api_qps, burst=options.kube_api_burst
        )
        self.recorder = EventRecorder(
            self.clients,
            options.provisioner_name,
            host=socket.gethostname(),
            spare_capacity=self.clients.spare_capacity,
        )
        self.elector: LeaderElector | None = None
        self._lease_clients: KubeClients | None = None
        self._lease_watch: Informer[dict[str, Any]] | None = None
        if options.leader_election:
            self._lease_clients = self.clients.leader_election_clients()
            lease_namespace = options.leader_election_namespace or options.namespace
            self.elector = LeaderElector(
                self._lease_clients,
                lease_namespace,
                lease_name_for(options.provisioner_name),
                config=LeaderElectionConfig(
                    lease_duration=options.leader_election_lease_duration,
                    renew_deadline=options.leader_election_renew_deadline,
                    retry_period=options.leader_election_retry_period,
                ),
                on_started_leading=self._start_leading,
                on_stopped_leading=self._stopped_leading,
                on_lost_lease=self._lost_lease,
            )
            self._lease_watch = lease_watch(
                self.clients, lease_namespace, self.elector.lease_name, self.elector.heard
            )
        actions = Actions(
            self.clients,
            self.recorder,
            self.metrics,
            csi_driver=driver_name_for(options.provisioner_name),
        )
        # The loop's queue: the local-path side adds the keys its helper runs and freed paths
        # wake, the loop's workers take them.
        queue: WorkQueue[Key] = WorkQueue(
            "provisioner", metrics=self.metrics.queue_metrics("provisioner")
        )
        self.caches = watched_caches(self.clients, helper_namespace=options.namespace)
        """The informers the local-path decisions and the leader's node scan read."""
        csi_driver = driver_name_for(options.provisioner_name)
        # Asked once: without the snapshot CRDs there is nothing to watch (an informer whose
        # list fails would never sync); installing them later takes a restart.
        contents = (
            contents_informer(self.clients, driver=csi_driver, resync_period=900.0)
            if snapshot_api_served(self.clients)
            else None
        )
        self.local_path = LocalPathProvisioner(
            self.clients,
            self.caches,
            self.watcher,
            actions,
            self.metrics,
            # Asked by the removal gate each time it decides.
            leadership=self.elector or SoleInstance(),
            queue=queue,
            provisioner_name=options.provisioner_name,
            helper_pod=PodSettings(options.namespace, options.helper_service_account),
            batch=BatchSettings(
                max_batch=options.helper_batch_size,
                pods_per_node=options.helper_pods_per_node,
                max_single_pods=options.workers,
                hold_timeout=options.helper_hold_timeout,
            ),
            capacity_min_interval=CAPACITY_MIN_INTERVAL_SECONDS,
            contents=contents,
            csi_driver=csi_driver,
        )
        self.local_path.helper_pods.observe(self.caches.helper_pods)
        self.watches = LocalPathWatches(
            self.caches,
            self.local_path,
            queue,
            provisioner_name=options.provisioner_name,
            contents=contents,
        )
        self.controller = Controller(
            queue,
            self.watches.watches(),
            self.local_path,
            self.local_path,
            ControllerSettings(
                workers=options.workers,
                # A claim's key retries its provisioning (an expansion's key, its resize); a
                # volume's its deletion, and so does a leftover helper pod's.
                retry_limits={
                    CLAIM: options.provisioning_retry_count,
                    EXPANSION: options.provisioning_retry_count,
                    VOLUME: options.deletion_retry_count,
                    HELPER_POD: options.deletion_retry_count,
                },
            ),
        )
        self.node_scanner = NodeScanner(
            self.local_path.helper_pods,
            self.caches,
            self.watcher,
            self.metrics,
            self.recorder,
            provisioner_name=options.provisioner_name,
            namespace=options.namespace,
            service_account=options.helper_service_account,
            interval_seconds=options.node_scan_interval,
        )
        self.predecessors: PredecessorWatch | None = None
        if options.predecessor_selector:
            self.predecessors = PredecessorWatch(
                self.clients,
                options.namespace,
                options.predecessor_selector,
                options.pod_name,
                on_returned=self._predecessor_returned,
            )
        self._api = ApiReachability(self.clients)

    # -- probes ----------------------------------------------------------------------------------

    def readiness(self) -> tuple[bool, str]:
        if not self.watcher.has_config():
            return False, self._config_problem()
        if not self._api.reachable():
            return False, "the Kubernetes API is not reachable"
        if self.elector is not None and not self.elector.is_leader:
            # Ready once warm, not before: a rolling update then stops the old leader only
            # when this replica can take over without a cold start.
            warm = self.controller.caches_warm()
            return (
                warm,
                f"standby: {self.elector.observed_holder or 'nobody'} leads;"
                f" caches {'warm' if warm else 'syncing'}",
            )
        if self.predecessors is not None and not self._leading.is_set():
            waiting_for = self.predecessors.waiting_for
            if waiting_for:
                return False, (
                    f"waiting for the predecessor's pods ({self.predecessors.selector}) to be"
                    f" gone: {waiting_for}"
                )
        if not self.controller.has_synced():
            return False, "informers are syncing"
        return True, "leading: informers synced"

    def liveness(self) -> tuple[bool, str]:
        """Alive while the election campaigns or leads and the leader's informers and workers
        make progress; a wedged process fails /healthz and the kubelet restarts it."""
        if not self._began.is_set():
            return True, "waiting for a valid configuration"
        if self.elector is not None and not self._stopping.is_set() and not self.elector.running:
            return False, "the leader election has stopped"
        bundle = self.watcher.current
        helper_run = kubelet_deadline_wait(
            bundle.config.cmd_timeout_seconds, helper_grace_seconds(bundle)
        )
        stall_after = 2 * helper_run + STALL_MARGIN_SECONDS
        problem = self.controller.liveness(stall_after)
        if problem is None and self.predecessors is not None:
            problem = self.predecessors.liveness()
        if problem is not None:
            return False, problem
        return True, self.local_path.helper_counts()

    # -- config reload -------------------------------------------------------------------------

    def _config_problem(self) -> str:
        return (
            f"no valid configuration in ConfigMap {self.options.namespace}/"
            f"{self.options.configmap_name}, so not provisioning: {self.watcher.waiting_for};"
            " fix that key and this replica starts within seconds"
        )

    def _config_reloaded(self, bundle: ConfigBundle) -> None:
        self.metrics.config_reload_total.labels("success").inc()
        if not self._began.is_set():
            log.info("a valid configuration arrived: starting")
            self._begin()
        elif self._leading.is_set():
            self.watches.config_changed()

    def _config_refused(self, error: ConfigError) -> None:
        self.metrics.config_reload_total.labels("invalid").inc()
        if self.watcher.has_config():
            message = f"refused the new configuration, the last valid one stays in force: {error}"
        else:
            message = f"refused the new configuration, still not provisioning: {error}"
        self._warn_invalid_config(message)

    def _warn_invalid_config(self, message: str) -> None:
        self.recorder.warning(
            ObjectReference(
                kind="ConfigMap", name=self.options.configmap_name, namespace=self.options.namespace
            ),
            "InvalidConfig",
            message,
        )

    # -- leadership ------------------------------------------------------------------------------

    def _start_leading(self) -> None:
        self.metrics.leader.labels(self.options.provisioner_name).set(1)
        # Syncing can take seconds; the elector's thread must stay free to renew the lease.
        threading.Thread(target=self._run_controller, name="controller-start", daemon=True).start()

    def _run_controller(self) -> None:
        if self.predecessors is not None and not self.predecessors.wait_until_gone(self._stopping):
            return
        try:
            self.controller.start()
        except Exception:
            log.exception("the controller failed to start; exiting")
            self._exit_code = EXIT_CONTROLLER_FAILED
            self.stop()
            return
        self._leading.set()
        self.node_scanner.start()

    def _predecessor_returned(self, pod: PredecessorPod) -> None:
        """No drain: a draining reconcile could still start a helper pod beside the
        predecessor's. The helper pods already running are deleted by the next leader, which
        first waits for this pod to be gone, and their work redone."""
        message = (
            f"pod {pod.name} of the provisioner this one took over runs in namespace"
            f" {self.options.namespace} ({pod.why}): stopped working so that the two never"
            " serve the same volumes; the next leader waits until it is gone. Stop the"
            " provisioner that made it (scale its Deployment to 0), or delete the pod"
        )
        log.error("%s; exiting", message)
        self.recorder.warning(
            ObjectReference(
                kind="Pod", name=pod.name, namespace=self.options.namespace, uid=pod.uid
            ),
            "PredecessorRunning",
            message,
        )
        self.recorder.flush(PREDECESSOR_WARNING_SECONDS)
        for handler in logging.getLogger().handlers:
            handler.flush()
        self.exit_now(EXIT_PREDECESSOR_RETURNED)

    def _stopped_leading(self) -> None:
        self.metrics.leader.labels(self.options.provisioner_name).set(0)

    def _lost_lease(self) -> None:
        """Also during a SIGTERM drain: the drain's workers would otherwise go on beside the
        replica that takes the lease next."""
        log.error(
            "lost the leader lease%s; exiting at once so that only one replica works (the new"
            " leader clears what was left running and redoes it)",
            " while shutting down" if self._stopping.is_set() else "",
        )
        for handler in logging.getLogger().handlers:
            handler.flush()
        self.exit_now(EXIT_LOST_LEADERSHIP)

    def exit_now(self, code: int) -> None:
        """No drain, no cleanup: the workers' API calls end with the process."""
        os._exit(code)

    # -- lifecycle -------------------------------------------------------------------------------

    def _let_go_if_removed(self) -> None:
        """Last, after this replica's work and lease: when the installation itself is being
        removed, no provisioner will be left to remove our finalizer, so we do it now (every
        replica does, so the last one to stop has the last word over a leader that re-added
        it). The PVs and their directories stay."""
        started = time.monotonic()
        reason = removal_reason(self.clients, self.options.namespace, self.options.pod_name)
        if reason is None:
            return
        budget = max(1.0, FINALIZER_RELEASE_SECONDS - (time.monotonic() - started))
        outcome = release_finalizers(self.clients, self.options.provisioner_name, budget)
        log.info(
            "the installation is being removed (%s): released the finalizer of %d volumes;"
            " they and their data stay",
            reason,
            len(outcome.released),
        )
        if outcome.left:
            log.error(
                "could not release the finalizer of %d volumes (remove it by hand): %s",
                len(outcome.left),
                ", ".join(outcome.left[:20]),
            )

    def stop(self) -> None:
        with self._begin_lock:
            self._stopping.set()

    def _begin(self) -> None:
        """Campaign (or, without election, lead) once there is a valid config; exactly once,
        from `run` or from the watcher's thread when the first valid version arrives."""
        with self._begin_lock:
            if self._began.is_set() or self._stopping.is_set():
                return
            self._began.set()
            if self.elector is not None:
                # A warm standby: its caches sync while it waits for the lease, and it hears
                # the leader's renewals as they are written.
                self.controller.start_informers()
                if self._lease_watch is not None:
                    self._lease_watch.start()
                self.elector.start()
            else:
                self._start_leading()

    def _settle(self) -> None:
        """Until the informers have synced, at most STARTUP_SETTLE_SECONDS: the probe server
        answers only then, so the kubelet's first probe (waiting meanwhile in the listening
        socket's backlog, which the server opened when it was built) gets the settled answer:
        Ready at once, and no failed probe (a Warning event) for a process that is merely
        starting."""
        deadline = time.monotonic() + STARTUP_SETTLE_SECONDS
        while not self.controller.caches_warm() and time.monotonic() < deadline:
            if self._stopping.wait(0.05):
                return

    def run(self) -> int:
        self._api.start()
        valid_at_start = self.watcher.has_config()
        if valid_at_start:
            self._begin()
            self._settle()
        self.server.start()
        if not valid_at_start:
            log.error(
                "invalid configuration in %s: %s; staying up, not ready and not provisioning"
                " until a valid version is mounted",
                self.options.config_path.parent,
                self.watcher.waiting_for,
            )
            self.metrics.config_reload_total.labels("invalid").inc()
            self._warn_invalid_config(
                f"no valid configuration at start-up, not provisioning: {self.watcher.waiting_for}"
            )
        self.watcher.start()
        self._stopping.wait()
        log.info("shutting down: no new work, finishing running reconciles")
        self.node_scanner.stop()
        if self.predecessors is not None:
            self.predecessors.stop()
        self.controller.stop()
        if self.elector is not None:
            self.elector.stop(timeout=LEASE_RELEASE_SECONDS)
        if self._lease_watch is not None:
            # Told to end, not waited for: its thread is a daemon and writes nothing.
            self._lease_watch.stop(timeout=0)
        self._let_go_if_removed()
        self.recorder.stop()
        self.watcher.stop()
        self.server.stop()
        self._api.stop()
        self.clients.close()
        if self._lease_clients is not None:
            self._lease_clients.close()
        return self._exit_code


def run(options: Options) -> int:
    configure_logging(debug=options.debug, json_lines=options.json_logs)
    try:
        provisioner = Provisioner(options)
    except KubeConfigError as error:
        log.error("cannot reach Kubernetes: %s", error)
        return EXIT_BAD_SETUP

    def on_signal(number: int, frame: FrameType | None) -> None:
        log.info("received %s", signal.Signals(number).name)
        provisioner.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log.info(
        "provisioner %s starting (namespace %s, %d workers, leader election %s)",
        options.provisioner_name,
        options.namespace,
        options.workers,
        "on" if options.leader_election else "off",
    )
    return provisioner.run()
