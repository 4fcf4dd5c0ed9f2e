"""Runs helper-labelled pods for real, standing in for the kubelet that kwok does not provide.

Why: the provisioner's helper pods create and remove directories on nodes; with fake nodes that
work would never happen and the provisioner could not be tested end to end. kwok's stages skip
these pods; this runner watches them and, once a pod is bound to an existing node, runs its
command in a sandbox whose absolute paths land in that node's directory, then reports status the
way a kubelet does (Running, then Succeeded/Failed with exit code and termination message).

Each pod's full output is kept in `<cluster dir>/pod-logs/<namespace>_<name>_<uid>.log`:
kwok cannot serve `pods/log` for pods it does not manage, so the log file, and the termination
message for failed containers with `terminationMessagePolicy: FallbackToLogsOnError`, are the
documented ways to read it.

Why it stays beside the real nodes, whose kubelet runs helper pods too (the tests of
tests/provisioner/e2e/real_nodes/, tests/engine/test_real_node_stack.py and
test_upgrade_rollback.py, marker `realnode`): every other test that binds a claim has its helper
pods run here, on the session cluster's kwok nodes (tests/conftest.py `cluster`):
tests/provisioner/e2e, tests/faults, tests/engine, the cluster tests of tests/localcluster and
tests/bench, and `python -m bench`'s kwok scenarios. They cannot move: a cluster with real nodes
needs root and is one per machine (a fixed Service address and bridge names), while test
sessions run side by side, and beside the demo, which takes that one place; the node-loss tests
(tests/faults/test_node_loss.py, test_node_loss_release.py,
tests/provisioner/e2e/test_lifecycle.py) add and delete nodes at will; and the suites and the
benchmark's kwok bursts start many helper pods, a tenth of a second each here against 2.2 s on a
real kubelet (pod_start.py prices that difference for the benchmark). What only a real kubelet
shows is left to the real nodes and not emulated here: the FailedMount event of a hostPath that
cannot be mounted, the helper image's own binaries (here the host's run), `pods/log`.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kubernetes import client

from localcluster import helper_pod_status as status
from localcluster.cluster_dirs import init_container_log_path, pod_log_path
from localcluster.event_log import EventLog, utc_now
from localcluster.helper_pods import (
    HELPER_POD_LABEL,
    HELPER_POD_LABEL_VALUE,
    NEVER_STARTS_IMAGE,
    START_ERROR_EXIT_CODE,
    SandboxPlan,
    SubPathError,
    UnsupportedPodError,
    helper_containers,
    plan_sandbox,
    resolve_sub_path,
    termination_file_message,
    termination_message_mount,
)
from localcluster.pod_api import PodRunnerBase
from localcluster.pod_start import FAST, NodeLanes, PodStartModel
from localcluster.pod_volumes import VolumeMaterializer, VolumeNotReadyError, prepare_host_paths
from localcluster.resource_watch import ResourceWatch
from localcluster.sandbox_process import SandboxOutcome, run_sandbox

RESYNC_SECONDS = 2


class _PodRun:
    """Book-keeping for one pod the runner has taken on."""

    def __init__(self, pod: Mapping[str, Any]) -> None:
        self.namespace: str = pod["metadata"]["namespace"]
        self.name: str = pod["metadata"]["name"]
        self.uid: str = pod["metadata"]["uid"]
        self.cancelled = threading.Event()
        self.finished = threading.Event()


class HelperPodRunner(PodRunnerBase):
    """Watches helper pods in all namespaces and runs those bound to existing nodes."""

    def __init__(
        self,
        api_client: client.ApiClient,
        cluster_dir: Path,
        node_dir: Callable[[str], Path],
        log: EventLog,
        *,
        pod_start: PodStartModel = FAST,
    ) -> None:
        super().__init__(api_client, cluster_dir, node_dir, log)
        self._pod_start = pod_start
        self._lanes = NodeLanes(pod_start)
        self._runs: dict[str, _PodRun] = {}
        self._waiting_reported: dict[str, str] = {}
        # A list (a resync that retries pods waiting for a node), then a watch for a while.
        self._watch = ResourceWatch(
            "helper-pod-runner",
            self.core.list_pod_for_all_namespaces,
            on_listed=self._listed,
            on_changed=self._changed,
            log=log,
            stopping=self._stopping,
            resync_seconds=RESYNC_SECONDS,
            label_selector=f"{HELPER_POD_LABEL}={HELPER_POD_LABEL_VALUE}",
        )

    def start(self) -> None:
        self._watch.start()

    def stop(self) -> None:
        """Stops watching, kills every running helper command, and waits for them."""
        self._stopping.set()
        with self._lock:
            runs = list(self._runs.values())
        for run in runs:
            run.cancelled.set()
        for run in runs:
            run.finished.wait(timeout=15)
        self._watch.join()

    def _listed(self, pods: list[dict[str, Any]]) -> None:
        for pod in pods:
            self._consider(pod)
        self._forget_finished({pod["metadata"]["uid"] for pod in pods})

    def _changed(self, kind: str, pod: dict[str, Any]) -> None:
        if kind == "DELETED":
            self._cancel(pod["metadata"]["uid"])
        else:
            self._consider(pod)

    def _consider(self, pod: dict[str, Any]) -> None:
        metadata, spec = pod["metadata"], pod.get("spec", {})
        uid = metadata["uid"]
        if metadata.get("deletionTimestamp"):
            self._cancel(uid)
            self.api.force_delete(metadata["namespace"], metadata["name"], uid)
            return
        with self._lock:
            if uid in self._runs or self._stopping.is_set():
                return
        phase = (pod.get("status") or {}).get("phase")
        node = spec.get("nodeName")
        if phase in ("Succeeded", "Failed") or not node or self.read_node(node) is None:
            return
        run = _PodRun(pod)
        with self._lock:
            self._runs[uid] = run
        # The first container to run (an init container, if the pod has any) waits for its image.
        initial = [*(spec.get("initContainers") or []), *(spec.get("containers") or [{}])][0]
        if initial.get("image") == NEVER_STARTS_IMAGE:
            self._report_waiting(
                pod,
                "ImagePullBackOff",
                f'Back-off pulling image "{NEVER_STARTS_IMAGE}"',
                init_index=0 if spec.get("initContainers") else None,
            )
            run.finished.set()
            return
        threading.Thread(
            target=self._run_pod, args=(pod, run), name=f"helper-pod-{run.name}", daemon=True
        ).start()

    def _forget_finished(self, present: set[str]) -> None:
        with self._lock:
            for uid in [uid for uid, run in self._runs.items() if uid not in present]:
                if self._runs[uid].finished.is_set():
                    del self._runs[uid]
            for uid in [uid for uid in self._waiting_reported if uid not in present]:
                del self._waiting_reported[uid]

    def _cancel(self, uid: str) -> None:
        with self._lock:
            run = self._runs.get(uid)
        if run is not None:
            run.cancelled.set()

    # One pod, in its own thread: set up volumes, run the sandbox, report the outcome.
    def _run_pod(self, pod: dict[str, Any], run: _PodRun) -> None:
        pods_dir = self.cluster_dir / "pods"
        pods_dir.mkdir(parents=True, exist_ok=True)
        # One directory per attempt: a retried pod never shares it with the attempt before.
        pod_dir = Path(tempfile.mkdtemp(prefix=f"{run.namespace}_{run.name}_", dir=pods_dir))
        try:
            self._execute(pod, run, pod_dir)
        except Exception as error:  # noqa: BLE001 - one pod's failure must not stop the runner
            self.log.write(f"{run.namespace}/{run.name}: runner error: {traceback.format_exc()}")
            now = utc_now()
            self._report_start_error(pod, now, now, f"local cluster helper runner: {error!r}", None)
        finally:
            shutil.rmtree(pod_dir, ignore_errors=True)
            run.finished.set()

    def _execute(self, pod: dict[str, Any], run: _PodRun, pod_dir: Path) -> None:
        node_dir = self.node_dir(pod["spec"]["nodeName"])
        try:
            containers = helper_containers(pod)
            prepare_host_paths(pod, node_dir)
            volumes = VolumeMaterializer(self.core, pod, pod_dir / "volumes").materialize()
            plans = [
                plan_sandbox(
                    pod,
                    root=pod_dir / f"root-{index}",
                    node_dir=node_dir,
                    materialized=volumes,
                    container=container,
                )
                for index, container in enumerate(containers)
            ]
        except VolumeNotReadyError as error:
            self._report_volume_not_ready(pod, error)
            with self._lock:  # forgotten, so the next resync tries again
                self._runs.pop(run.uid, None)
            return
        except UnsupportedPodError as error:
            now = utc_now()
            self._report_start_error(pod, now, now, error.message, error.reason)
            return
        # The node's lane: its other pods' sandboxes, started before this one, go first.
        if not self._lanes.wait_sandbox(pod["spec"]["nodeName"], run.cancelled):
            return
        # activeDeadlineSeconds counts from the pod's start, across all its containers.
        deadline = pod["spec"].get("activeDeadlineSeconds")
        ends_at = time.monotonic() + deadline if deadline else None
        init_done: list[dict[str, Any]] = []
        for index, (container, planned) in enumerate(zip(containers, plans, strict=True)):
            main = index == len(containers) - 1
            container_dir = pod_dir / f"container-{index}"
            container_dir.mkdir()
            log_path = (
                pod_log_path(self.cluster_dir, run.namespace, run.name, run.uid)
                if main
                else init_container_log_path(
                    self.cluster_dir, run.namespace, run.name, run.uid, container["name"]
                )
            )
            try:
                plan = self._with_termination_file(planned, container, container_dir)
            except SubPathError as error:
                # As a kubelet: the container is not created, the pod waits (its deadline or
                # its deletion ends it).
                self._report_waiting(
                    pod,
                    "CreateContainerConfigError",
                    f"failed to prepare subPath for volumeMount of container "
                    f"{container['name']!r}: {error}",
                    init_index=None if main else index,
                )
                return
            plan_path = container_dir / "plan"
            plan_path.write_bytes(plan.encode())
            if not self._pod_start.wait_container(run.cancelled):
                return
            started_at = utc_now()
            if main:
                self.api.patch_status(pod, status.running_status(pod, started_at, init_done))
            else:
                self.api.patch_status(pod, status.init_running_status(pod, started_at, init_done))
            outcome = run_sandbox(
                plan_path,
                log_path,
                deadline_seconds=None if ends_at is None else max(0.1, ends_at - time.monotonic()),
                cancelled=run.cancelled,
                on_started=lambda pid: self._started(run, pid),
            )
            if outcome is None:
                self.log.write(
                    f"{run.namespace}/{run.name}: killed (pod deleted or cluster stopping)"
                )
                return
            written = container_dir / "termination-log"
            message = termination_file_message(written.read_bytes()) if written.exists() else ""
            if main:
                if outcome.start_failure:
                    self._report_start_error(
                        pod, started_at, utc_now(), outcome.start_failure, None
                    )
                else:
                    self._report_terminated(
                        pod, run, outcome, started_at, message, init_done=init_done
                    )
                return
            terminated = self._init_outcome(
                pod,
                container,
                outcome,
                started_at=started_at,
                written_message=message,
                log_path=log_path,
            )
            if terminated["exitCode"] != 0 or outcome.deadline_exceeded:
                self.log.write(
                    f"{run.namespace}/{run.name}: init container {container['name']} exited "
                    f"with {terminated['exitCode']}"
                )
                deadline_hit = outcome.deadline_exceeded
                self.api.patch_status(
                    pod,
                    status.init_failed_status(
                        pod,
                        init_done,
                        terminated,
                        pod_reason="DeadlineExceeded" if deadline_hit else None,
                        pod_message=status.DEADLINE_EXCEEDED_MESSAGE if deadline_hit else None,
                    ),
                )
                return
            init_done.append(terminated)

    @staticmethod
    def _with_termination_file(
        plan: SandboxPlan, container: Mapping[str, Any], container_dir: Path
    ) -> SandboxPlan:
        message_mount = termination_message_mount(container, container_dir / "termination-log")
        if message_mount is not None:
            Path(message_mount.source).touch()
            mounts = sorted([*plan.mounts, message_mount], key=lambda m: m.target.count("/"))
            plan = dataclasses.replace(plan, mounts=mounts)
        # A subPath is resolved (and made when missing) as its container starts, as by a kubelet.
        mounts = [resolve_sub_path(mount) for mount in plan.mounts]
        for mount in mounts:
            source = Path(mount.source)
            if not source.exists():
                source.mkdir(parents=True)
        return dataclasses.replace(plan, mounts=mounts)

    @staticmethod
    def _init_outcome(
        pod: dict[str, Any],
        container: Mapping[str, Any],
        outcome: SandboxOutcome,
        *,
        started_at: str,
        written_message: str,
        log_path: Path,
    ) -> dict[str, Any]:
        """The terminated state an init container's run leaves."""
        if outcome.start_failure:
            code, reason, message = START_ERROR_EXIT_CODE, "StartError", outcome.start_failure
        else:
            log = log_path.read_bytes() if log_path.exists() else b""
            code, reason = outcome.exit_code, status.exit_reason(outcome.exit_code)
            message = written_message or status.failure_message(container, code, log)
        return status.terminated_state(
            pod,
            exit_code=code,
            reason=reason,
            message=message,
            started_at=started_at,
            finished_at=utc_now(),
        )

    def _started(self, run: _PodRun, pid: int) -> None:
        self.started_pids.append(pid)
        self.log.write(f"{run.namespace}/{run.name}: started pid {pid}")

    # Reporting to the API.
    def _report_terminated(
        self,
        pod: dict[str, Any],
        run: _PodRun,
        outcome: SandboxOutcome,
        started_at: str,
        written_message: str = "",
        *,
        init_done: list[dict[str, Any]] | None = None,
    ) -> None:
        """`written_message`: what the container wrote to its termination-message file, which
        a kubelet reports in preference to the log tail."""
        log_path = pod_log_path(self.cluster_dir, run.namespace, run.name, run.uid)
        log = log_path.read_bytes() if log_path.exists() else b""
        container = pod["spec"]["containers"][0]
        code, deadline = outcome.exit_code, outcome.deadline_exceeded
        self.log.write(f"{run.namespace}/{run.name}: exited with {code}")
        self.api.patch_status(
            pod,
            status.terminated_status(
                pod,
                exit_code=code,
                reason=status.exit_reason(code),
                message=written_message or status.failure_message(container, code, log),
                started_at=started_at,
                finished_at=utc_now(),
                pod_reason="DeadlineExceeded" if deadline else None,
                pod_message=status.DEADLINE_EXCEEDED_MESSAGE if deadline else None,
                init_done=init_done,
            ),
        )

    def _report_start_error(
        self,
        pod: dict[str, Any],
        started_at: str,
        finished_at: str,
        message: str,
        pod_reason: str | None,
    ) -> None:
        self.log.write(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}: {message}")
        self.api.patch_status(
            pod,
            status.terminated_status(
                pod,
                exit_code=START_ERROR_EXIT_CODE,
                reason="StartError",
                message=message,
                started_at=started_at,
                finished_at=finished_at,
                pod_reason=pod_reason,
                pod_message=message if pod_reason else None,
            ),
        )

    def _report_volume_not_ready(self, pod: dict[str, Any], error: VolumeNotReadyError) -> None:
        # As a kubelet: every container of a pod with init containers waits PodInitializing.
        first_init = 0 if pod["spec"].get("initContainers") else None
        reason = "ContainerCreating" if first_init is None else "PodInitializing"
        self._report_waiting(pod, reason, f"volume not ready: {error}", init_index=first_init)

    def _report_waiting(
        self, pod: dict[str, Any], reason: str, message: str, *, init_index: int | None = None
    ) -> None:
        """Unless the pod was last reported waiting with this message."""
        uid = pod["metadata"]["uid"]
        with self._lock:
            if self._waiting_reported.get(uid) == message:
                return
            self._waiting_reported[uid] = message
        self.api.patch_status(
            pod, status.waiting_status(pod, utc_now(), reason, message, init_index=init_index)
        )
