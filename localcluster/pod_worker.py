"""Runs one image-table pod the way a kubelet does, from its binding to its deletion.

Why: the provisioner's Deployment must really run: its pods get their own network namespace
(pod_network.py), their volumes written and kept up to date (ConfigMaps swapped atomically,
service-account tokens renewed), the container started in the node sandbox with the pod's
environment and security context, probes that decide Ready and restart the container, the
kubelet's crash-loop back-off, and on deletion SIGTERM, the grace period, SIGKILL and the
confirming delete. One pod's trouble stays in its own thread and is reported in its status.
"""

from __future__ import annotations

import shutil
import threading
import time
import traceback
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from localcluster import container_status as statuses
from localcluster import image_pod_plan as rules
from localcluster.atomic_writer import write_atomically
from localcluster.container_run import ContainerRun
from localcluster.event_log import utc_now
from localcluster.helper_pods import SandboxPlan, UnsupportedPodError, only_container, plan_sandbox
from localcluster.pod_api import API_ERRORS
from localcluster.pod_env import container_environment
from localcluster.pod_volumes import VolumeMaterializer, VolumeNotReadyError, prepare_host_paths
from localcluster.running_pod import RunningPod, WorkerContext

RETRY_SECONDS = 2.0
VOLUME_RESYNC_SECONDS = 60.0
EMPTY_DIR_MODE = 0o777


class PodWorker(RunningPod):
    """One pod's life in a thread, from its sandbox to its deletion."""

    def __init__(self, pod: dict[str, Any], context: WorkerContext) -> None:
        super().__init__(pod, context)
        self.config_maps = rules.config_maps_of(pod)
        self.finished = threading.Event()
        # Per-container roots, sandbox plans and the volumes' files, removed when it ends.
        self.pod_dir = context.cluster_dir / "pods" / self.uid
        self.materializer = VolumeMaterializer(context.core, pod, self.pod_dir / "volumes")

    # The pod's thread.
    def run(self) -> None:
        try:
            self._live()
        except Exception:  # noqa: BLE001 - one pod's failure must not stop the runner
            self.log(f"worker error: {traceback.format_exc()}")
            self.waiting("RunContainerError", "local cluster runner error; see harness.log")
            while self.sleep(3600):
                pass
        finally:
            self.volumes_changed.set()
            self.network.stop()
            shutil.rmtree(self.pod_dir, ignore_errors=True)
            if self.deleting.is_set() and not self.gone.is_set():
                self.context.api.force_delete(self.namespace, self.name, self.uid)
            self.finished.set()
            self.log("finished")

    def _live(self) -> None:
        self.pod_dir.mkdir(parents=True, exist_ok=True)
        self.report()
        self.network.start()
        if self.network.pause_pid is not None:
            self.context.on_process(self.network.pause_pid)
        self.sandbox_ready = True
        volumes = self._prepare_volumes()
        if volumes is None:
            return
        threading.Thread(
            target=self._refresh_volumes, name=f"pod-volumes-{self.name}", daemon=True
        ).start()
        self._restart_loop(volumes)
        while self.sleep(3600):  # a finished pod stays until it is deleted
            pass

    def _restart_loop(self, volumes: Mapping[str, Path]) -> None:
        policy = self.pod["spec"].get("restartPolicy", "Always")
        in_a_row, last_restart = 0, time.monotonic()
        attempt = 0
        while not self.stopping():
            if attempt:
                in_a_row = (
                    1
                    if self.context.backoff.expired(time.monotonic() - last_restart)
                    else in_a_row + 1
                )
                delay = self.context.backoff.delay(in_a_row)
                self.life.last_state = self.life.state
                if delay:
                    message = statuses.back_off_message(delay, self.pod, self.life.name)
                    self.waiting("CrashLoopBackOff", message)
                    if not self.sleep(delay):
                        return
                last_restart = time.monotonic()
                self.life.restart_count += 1
            exit_code = self._start_container(volumes, attempt)
            attempt += 1
            if exit_code is None:
                return
            if not rules.should_restart(policy, exit_code):
                self.phase = "Succeeded" if exit_code == 0 else "Failed"
                self.report()
                return

    def _start_container(self, volumes: Mapping[str, Path], attempt: int) -> int | None:
        """One run of the container; its exit code, None when stopped for good."""
        while True:
            try:
                plan = self._plan(volumes, attempt)
                break
            except rules.ContainerConfigError as error:
                self.waiting("CreateContainerConfigError", str(error))
                if not self.sleep(RETRY_SECONDS):
                    return None
            except UnsupportedPodError as error:
                return self._start_error(error.message, attempt)
        plan_path = self.pod_dir / f"plan-{attempt}"
        plan_path.write_bytes(plan.encode())
        run = ContainerRun(self, plan_path, attempt)
        return run.run()

    def _plan(self, volumes: Mapping[str, Path], attempt: int) -> SandboxPlan:
        container = only_container(self.pod)
        security = rules.security_settings(self.pod, container, self.context.runtime)
        defaults = rules.environment_defaults(
            self.context.runtime, self.context.api_port, security.user
        )
        env = container_environment(
            container,
            self.name,
            pod=self.pod_with_ips(),
            defaults=defaults,
        )
        plan = plan_sandbox(
            self.pod,
            root=self.pod_dir / f"root-{attempt}",
            node_dir=self.context.node_dir,
            materialized=volumes,
            env=env,
            image=self.context.runtime,
        )
        return replace(
            plan,
            network_namespace=self.network.namespace_path,
            user=security.user,
            group=security.group,
            read_only_root=security.read_only_root,
            fresh_tmp=False,
        )

    def _start_error(self, message: str, attempt: int) -> int:
        now = utc_now()
        self.life.state = statuses.terminated(
            128,
            started_at=now,
            finished_at=now,
            container_id=statuses.container_id(self.uid, attempt),
            message=message,
        )
        self.log(message)
        self.report()
        return 128

    # Volumes.
    def _prepare_volumes(self) -> dict[str, Path] | None:
        while not self.stopping():
            try:
                prepare_host_paths(self.pod, self.context.node_dir)
                return self._write_volumes()
            except VolumeNotReadyError as error:
                self.waiting("ContainerCreating", f"volume not ready: {error}")
                self.sleep(RETRY_SECONDS)
        return None

    def _write_volumes(self) -> dict[str, Path]:
        materializer = self.materializer
        materializer.pod = self.pod_with_ips()
        directories = {}
        for name, kind, source in materializer.materialized_volumes():
            directory = materializer.volumes_dir / name
            if kind == "emptyDir":
                directory.mkdir(parents=True, exist_ok=True)
                directory.chmod(EMPTY_DIR_MODE)
            elif write_atomically(directory, materializer.volume_files(kind, source)):
                self.log(f"volume {name} written")
            directories[name] = directory
        return directories

    def _refresh_volumes(self) -> None:
        """Rewrites changed volumes: on a ConfigMap change, and every minute (downward-API
        fields), as the kubelet's volume manager does."""
        while not self.stopping() and not self.finished.is_set():
            self.volumes_changed.wait(VOLUME_RESYNC_SECONDS)
            self.volumes_changed.clear()
            if self.stopping() or self.finished.is_set():
                return
            try:
                self._write_volumes()
            except (VolumeNotReadyError, *API_ERRORS) as error:
                # As a kubelet: the last version written stays (e.g. a deleted ConfigMap).
                self.log(f"volume refresh failed, keeping the last version: {error}")
