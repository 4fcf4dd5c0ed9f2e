"""The provisioners under test, as processes: ours (`python -m provisioner`), also with
capacity on (burst only: a budget on its base path and a CSIDriver asking for capacity, see
`bench.capacity`), with CSI volumes (real nodes only: a `volumeType: csi` class and a node
plugin per node, see `bench.csi`), and the Go reference (rancher/local-path-provisioner) with
its defaults and tuned like ours.

Readiness is read from each one's log, at the line each prints once its informers have synced:
ours "caches synced", the reference library's "Started provisioner controller".
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from bench.capacity import declares_capacity
from bench.workspace import (
    CONFIGMAP,
    HELPER_SERVICE_ACCOUNT,
    PROVISIONER_NAMESPACE,
    Workspace,
)
from localcluster.ports import pick_free_ports

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(
    os.environ.get("LPS_CACHE_DIR")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "local-path-storage"
)
REFERENCE_VERSION = "v0.0.37"
REFERENCE_BINARY = CACHE / "bin" / f"local-path-provisioner-{REFERENCE_VERSION}"
TUNED = {"workers": 8, "qps": 50, "burst": 100}


class ProvisionerExitedError(Exception):
    """The process under test ended before it was ready."""


@dataclass(frozen=True)
class Implementation:
    key: str
    label: str
    reference: bool
    tuned: bool
    user_agent_prefix: str
    ready_line: str
    capacity: bool = False
    """Ours with capacity on: its burst runs in the capacity workspace; it has no scale run."""
    csi: bool = False
    """Ours with CSI volumes: its bursts run in the CSI workspace, on real nodes only."""

    def command(self, workspace: Workspace, port: int) -> list[str]:
        kubeconfig = str(workspace.cluster.kubeconfig)
        if self.capacity != (workspace.capacity_budget is not None):
            raise ValueError(f"{self.label} run in the wrong workspace")
        if self.csi != workspace.csi:
            raise ValueError(f"{self.label} run in the wrong workspace")
        if not self.reference:
            return [
                sys.executable, "-m", "provisioner", "start",
                "--kubeconfig", kubeconfig,
                "--provisioner-name", workspace.provisioner_name,
                "--namespace", PROVISIONER_NAMESPACE,
                "--config", str(workspace.config_file),
                "--configmap-name", CONFIGMAP,
                "--service-account-name", HELPER_SERVICE_ACCOUNT,
                "--metrics-address", "127.0.0.1",
                "--metrics-port", str(port),
                "--worker-threads", str(TUNED["workers"]),
                "--kube-api-qps", str(TUNED["qps"]),
                "--kube-api-burst", str(TUNED["burst"]),
            ]  # fmt: skip
        if declares_capacity(workspace.config_file.read_text()):
            # The reference does not understand the object form of a path.
            raise ValueError("the reference never gets a config.json with capacities")
        command = [
            str(REFERENCE_BINARY), "start",
            "--kubeconfig", kubeconfig,
            "--config", str(workspace.config_file),
            "--provisioner-name", workspace.provisioner_name,
            "--namespace", PROVISIONER_NAMESPACE,
            "--helper-image", "busybox",
            "--configmap-name", CONFIGMAP,
            "--service-account-name", HELPER_SERVICE_ACCOUNT,
            "--helper-pod-file", str(workspace.helper_pod_file),
            "--health-port", str(port),
        ]  # fmt: skip
        if self.tuned:
            command += [
                "--worker-threads", str(TUNED["workers"]),
                "--kube-client-qps", str(TUNED["qps"]),
                "--kube-client-burst", str(TUNED["burst"]),
            ]  # fmt: skip
        return command


OURS = Implementation(
    "ours", "ours", False, True, "local-path-storage-provisioner/", "caches synced"
)
OURS_CAPACITY = Implementation(
    "ours-capacity",
    "ours (capacity on)",
    False,
    True,
    "local-path-storage-provisioner/",
    "caches synced",
    capacity=True,
)
OURS_CSI = Implementation(
    "ours-csi",
    "ours (CSI volumes)",
    False,
    True,
    "local-path-storage-provisioner/",
    "caches synced",
    csi=True,
)
"""Its user agent prefix is the node plugins' too: its requests per volume count both."""
REFERENCE_DEFAULT = Implementation(
    "reference-default",
    "reference (defaults)",
    True,
    False,
    "local-path-provisioner-",
    "Started provisioner controller",
)
REFERENCE_TUNED = Implementation(
    "reference-tuned",
    "reference (tuned)",
    True,
    True,
    "local-path-provisioner-",
    "Started provisioner controller",
)
ALL = (OURS, OURS_CAPACITY, OURS_CSI, REFERENCE_DEFAULT, REFERENCE_TUNED)


class RunningProvisioner:
    """One process under test; its output goes to `log_path`."""

    def __init__(
        self,
        implementation: Implementation,
        workspace: Workspace,
        log_path: Path,
        py_spy: Path | None = None,
    ) -> None:
        """With `py_spy`, ours runs under `py-spy record` (raw collapsed stacks beside the log);
        the figures then include the profiler's overhead, so use it for profiles only."""
        self.implementation = implementation
        self.log_path = log_path
        self._log = log_path.open("wb")
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        env["PYTHONUNBUFFERED"] = "1"
        self.port = pick_free_ports(1)[0]  # ours' /metrics port (the reference's health port)
        command = implementation.command(workspace, self.port)
        self.profiled = py_spy is not None and not implementation.reference
        if py_spy is not None and self.profiled:
            self.profile_path = log_path.with_suffix(".py-spy.txt")
            command = [
                str(py_spy), "record", "--rate", "200", "--format", "raw", "--threads",
                "--output", str(self.profile_path), "--", *command,
            ]  # fmt: skip
        self.started_at = time.time()
        self.process = subprocess.Popen(
            command, env=env, stdout=self._log, stderr=subprocess.STDOUT, cwd=REPO
        )
        self._target = self.process.pid if not self.profiled else self._profiled_child()

    def _profiled_child(self) -> int:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            children = psutil.Process(self.process.pid).children()
            if children:
                return children[0].pid
            time.sleep(0.01)
        raise ProvisionerExitedError(f"py-spy started no provisioner; log: {self.log_path}")

    @property
    def pid(self) -> int:
        """The provisioner's own process (not the profiler's)."""
        return self._target

    def wait_ready(self, timeout: float = 300.0) -> float:
        """Seconds from the process start to its "informers synced" log line."""
        deadline = time.monotonic() + timeout
        needle = self.implementation.ready_line.encode()
        while time.monotonic() < deadline:
            if needle in self.log_path.read_bytes():
                return time.time() - self.started_at
            if self.process.poll() is not None:
                raise ProvisionerExitedError(
                    f"{self.implementation.label} exited with {self.process.returncode}; "
                    f"log: {self.log_path}"
                )
            time.sleep(0.02)
        raise TimeoutError(f"{self.implementation.label} not ready in {timeout:.0f}s")

    def stop(self, timeout: float = 30.0) -> None:
        if self.process.poll() is None:
            # Under py-spy, the provisioner stops and py-spy then writes its profile and exits.
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._log.close()
