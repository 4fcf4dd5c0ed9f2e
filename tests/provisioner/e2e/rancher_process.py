"""rancher/local-path-provisioner's real binary (v0.0.37, built by
`scripts/build-go-tools.sh reference`) run against the local cluster as the bench runs it
(bench/implementations.py), on a test's namespace, ConfigMap, config directory and provisioner
name, so that ours can later be started on the very same installation."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import yaml

from bench.implementations import REFERENCE_BINARY
from localcluster import HELPER_POD_LABEL, HELPER_POD_LABEL_VALUE, LocalCluster, wait_for
from localcluster.ports import pick_free_ports
from tests.provisioner.e2e.support import CONFIGMAP, HELPER_SERVICE_ACCOUNT

# The scripts of rancher's v0.0.37 manifest (deploy/local-path-storage.yaml), as its ConfigMap
# holds them: the teardown ours runs for an adopted volume is rancher's own.
RANCHER_SETUP = '#!/bin/sh\nset -eu\nmkdir -m 0777 -p "$VOL_DIR"'
RANCHER_TEARDOWN = '#!/bin/sh\nset -eu\nrm -rf "$VOL_DIR"'
RANCHER_HELPER_POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: helper-pod
spec:
  priorityClassName: system-node-critical
  tolerations:
    - key: node.kubernetes.io/disk-pressure
      operator: Exists
      effect: NoSchedule
  containers:
  - name: helper-pod
    image: docker.io/library/busybox
    imagePullPolicy: IfNotPresent
"""
READY_LINE = b"Started provisioner controller"


def labelled_helper_pod(template: str = RANCHER_HELPER_POD, image: str | None = None) -> str:
    """rancher's helperPod.yaml with the harness's helper label (rancher keeps a template's
    labels, so the harness runs its helper pods for real), and optionally another image."""
    pod = yaml.safe_load(template)
    pod["metadata"].setdefault("labels", {})[HELPER_POD_LABEL] = HELPER_POD_LABEL_VALUE
    if image is not None:
        pod["spec"]["containers"][0]["image"] = image
    return str(yaml.safe_dump(pod, sort_keys=False))


class RancherProcess:
    """One rancher provisioner serving `provisioner_name` from `config_dir` (config.json and
    helperPod.yaml), with its helper pods in `namespace`."""

    def __init__(
        self,
        cluster: LocalCluster,
        config_dir: Path,
        provisioner_name: str,
        namespace: str,
        log_path: Path,
        *,
        service_account: str = HELPER_SERVICE_ACCOUNT,
    ) -> None:
        """`service_account`: of rancher's helper pods (its manifest's default is its own)."""
        if not REFERENCE_BINARY.is_file():
            raise AssertionError(
                f"{REFERENCE_BINARY} is missing: build it with scripts/build-go-tools.sh reference"
            )
        self.log_path = log_path
        self._log = log_path.open("ab")
        command = [
            str(REFERENCE_BINARY), "start",
            "--kubeconfig", str(cluster.kubeconfig),
            "--config", str(config_dir / "config.json"),
            "--provisioner-name", provisioner_name,
            "--namespace", namespace,
            "--configmap-name", CONFIGMAP,
            "--service-account-name", service_account,
            "--helper-pod-file", str(config_dir / "helperPod.yaml"),
            "--health-port", str(pick_free_ports(1)[0]),
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        # As its Deployment sets it: the namespace the library would hold its lock in.
        env["POD_NAMESPACE"] = namespace
        self.process = subprocess.Popen(
            command, env=env, stdout=self._log, stderr=subprocess.STDOUT
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = 60) -> None:
        def ready() -> bool | None:
            if self.process.poll() is not None:
                raise AssertionError(f"rancher exited early:\n{self.log()[-3000:]}")
            return True if READY_LINE in self.log_path.read_bytes() else None

        wait_for(ready, timeout, "rancher's provisioner controller to start")

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout: float = 30) -> None:
        """Ends the process (SIGKILL: as a node loss or `kubectl delete pod --force` does)."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        self._log.close()
