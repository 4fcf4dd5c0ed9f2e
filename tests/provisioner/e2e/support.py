"""Running the provisioner as a real process against the local cluster, and the objects the
end-to-end tests create.

Each test gets its own provisioner name, namespace and class names, so tests share the session
cluster without seeing each other's claims.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kubernetes.client.exceptions import ApiException

from localcluster import LocalCluster, wait_for
from localcluster.ports import pick_free_ports
from localcluster.raw_api import call_json, manifest
from provisioner.configuration.config import (
    DEFAULT_HELPER_POD_YAML,
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
    RANCHER_DEFAULT_PATH,
)

REPO = Path(__file__).resolve().parents[3]
HELPER_SERVICE_ACCOUNT = "local-path-helper"
CONFIGMAP = "local-path-config"
T = TypeVar("T")


def default_config(path: str = RANCHER_DEFAULT_PATH) -> dict[str, Any]:
    return {
        "nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": [creatable(path)]}]
    }


def creatable(path: str) -> str | dict[str, Any]:
    """A base path the helpers may create: a test's own paths are not there beforehand (only
    rancher's default path is created without being told)."""
    return path if path == RANCHER_DEFAULT_PATH else {"path": path, "create": True}


@dataclass
class ConfigFiles:
    config: dict[str, Any] = field(default_factory=default_config)
    setup: str = DEFAULT_SETUP_SCRIPT
    teardown: str = DEFAULT_TEARDOWN_SCRIPT
    helper_pod: str = DEFAULT_HELPER_POD_YAML

    def as_keys(self) -> dict[str, str]:
        return {
            "config.json": json.dumps(self.config),
            "setup": self.setup,
            "teardown": self.teardown,
            "helperPod.yaml": self.helper_pod,
        }


class ProvisionerProcess:
    """One `python -m provisioner` process (a replica)."""

    def __init__(self, command: list[str], env: dict[str, str], log_path: Path, port: int):
        self.log_path = log_path
        self.port = port
        # The child holds its own copy of the log's descriptor: ours is closed at once, so a
        # replica that exits on its own (a lost lease, say) leaves no file open in the tests.
        with log_path.open("ab") as log:
            self.process = subprocess.Popen(
                command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO
            )

    @property
    def pid(self) -> int:
        return self.process.pid

    def probe(self, path: str) -> tuple[int, str]:
        try:
            url = f"http://127.0.0.1:{self.port}{path}"
            with urllib.request.urlopen(url, timeout=3) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()
        except OSError as error:
            return 0, str(error)

    def metrics(self) -> str:
        return self.probe("/metrics")[1]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 30) -> int:
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait(10)
        return code

    def kill(self) -> None:
        if self.alive():
            self.process.kill()
        self.process.wait(10)


class ProvisionerSetup:
    """A namespace, helper service account, ConfigMap, config directory and provisioner name
    for one test, plus the replicas started for it."""

    def __init__(self, cluster: LocalCluster, work_dir: Path, files: ConfigFiles) -> None:
        self.cluster = cluster
        self.suffix = uuid.uuid4().hex[:6]
        self.name = f"e2e-{self.suffix}.lps.io/local-path"
        self.namespace = f"lps-{self.suffix}"
        self.config_dir = work_dir / "config"
        self.config_dir.mkdir(parents=True)
        self.work_dir = work_dir
        self.replicas: list[ProvisionerProcess] = []
        self.core = cluster.core_v1()
        self.storage = cluster.storage_v1()
        cluster.create_namespace(self.namespace)
        self.core.create_namespaced_service_account(
            self.namespace,
            manifest(
                {
                    "metadata": {"name": HELPER_SERVICE_ACCOUNT},
                    "automountServiceAccountToken": False,
                }
            ),
        )
        self.core.create_namespaced_config_map(
            self.namespace, manifest({"metadata": {"name": CONFIGMAP}, "data": files.as_keys()})
        )
        self.write_files(files)
        self.classes: list[str] = []

    # -- configuration -------------------------------------------------------------------------

    def write_files(self, files: ConfigFiles) -> None:
        """Writes the local config directory atomically per file (the provisioner's view)."""
        for key, text in files.as_keys().items():
            temporary = self.config_dir / f".{key}.tmp"
            temporary.write_text(text)
            temporary.replace(self.config_dir / key)

    def update_config(self, files: ConfigFiles) -> None:
        """What `kubectl apply` of the ConfigMap does: the object and (via kubelet) the files."""
        self.core.replace_namespaced_config_map(
            CONFIGMAP,
            self.namespace,
            manifest({"metadata": {"name": CONFIGMAP}, "data": files.as_keys()}),
        )
        self.write_files(files)

    # -- replicas ----------------------------------------------------------------------------------

    def start(
        self, *extra: str, kubeconfig: Path | None = None, wait_ready: bool = True
    ) -> ProvisionerProcess:
        port = pick_free_ports(1)[0]
        index = len(self.replicas)
        command = [
            sys.executable,
            "-m",
            "provisioner",
            "start",
            "--kubeconfig",
            str(kubeconfig or self.cluster.kubeconfig),
            "--provisioner-name",
            self.name,
            "--namespace",
            self.namespace,
            "--config",
            str(self.config_dir / "config.json"),
            "--configmap-name",
            CONFIGMAP,
            "--service-account-name",
            HELPER_SERVICE_ACCOUNT,
            "--metrics-address",
            "127.0.0.1",
            "--metrics-port",
            str(port),
            "--debug",
            *extra,
        ]
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        env["PYTHONUNBUFFERED"] = "1"
        replica = ProvisionerProcess(command, env, self.work_dir / f"provisioner-{index}.log", port)
        self.replicas.append(replica)
        if wait_ready:
            self.wait_ready(replica)
        return replica

    def wait_ready(self, replica: ProvisionerProcess, timeout: float = 60) -> None:
        def ready() -> bool | None:
            if not replica.alive():
                raise AssertionError(f"provisioner exited early:\n{replica.log()[-3000:]}")
            status, body = replica.probe("/readyz")
            return True if status == 200 and "leading" in body else None

        wait_for(ready, timeout, "the provisioner to lead with synced informers")

    def stop_all(self) -> None:
        for replica in self.replicas:
            if replica.alive():
                replica.stop()

    # -- objects -----------------------------------------------------------------------------------

    def create_class(
        self,
        short_name: str,
        *,
        binding_mode: str = "WaitForFirstConsumer",
        reclaim_policy: str = "Delete",
        parameters: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
    ) -> str:
        name = f"{short_name}-{self.suffix}"
        self.storage.create_storage_class(
            manifest(
                {
                    "metadata": {"name": name, "annotations": dict(annotations or {})},
                    "provisioner": self.name,
                    "reclaimPolicy": reclaim_policy,
                    "volumeBindingMode": binding_mode,
                    "parameters": dict(parameters or {}),
                }
            )
        )
        self.classes.append(name)
        return name

    def create_claim(
        self,
        name: str,
        storage_class: str,
        *,
        size: str = "1Gi",
        access_modes: Sequence[str] = ("ReadWriteOnce",),
        annotations: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None,
        volume_mode: str = "Filesystem",
    ) -> None:
        body = {
            "metadata": {
                "name": name,
                "annotations": dict(annotations or {}),
                "labels": dict(labels or {}),
            },
            "spec": {
                "storageClassName": storage_class,
                "accessModes": list(access_modes),
                "resources": {"requests": {"storage": size}},
                "volumeMode": volume_mode,
            },
        }
        self.core.create_namespaced_persistent_volume_claim(self.namespace, manifest(body))

    def create_consumer(
        self, name: str, claim: str, node_selector: Mapping[str, str] | None = None
    ) -> None:
        spec: dict[str, Any] = {
            "containers": [
                {
                    "name": "app",
                    "image": "registry.invalid/app:1",
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }
            ],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
        }
        if node_selector:
            spec["nodeSelector"] = dict(node_selector)
        self.core.create_namespaced_pod(
            self.namespace, manifest({"metadata": {"name": name}, "spec": spec})
        )

    # Objects come back as the API's JSON (plain dicts), as in manifests.

    def claim(self, name: str) -> dict[str, Any]:
        return call_json(self.core.read_namespaced_persistent_volume_claim, name, self.namespace)

    def annotations(self, claim: str) -> dict[str, str]:
        return dict(self.claim(claim)["metadata"].get("annotations") or {})

    def phase(self, claim: str) -> str:
        return str(self.claim(claim).get("status", {}).get("phase", ""))

    def volume(self, name: str) -> dict[str, Any] | None:
        try:
            return call_json(self.core.read_persistent_volume, name)
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def wait_bound(self, claim: str, timeout: float = 60) -> dict[str, Any]:
        def bound() -> str | None:
            current = self.claim(claim)
            if current.get("status", {}).get("phase") == "Bound":
                return str(current["spec"]["volumeName"])
            return None

        volume_name = wait_for(bound, timeout, f"claim {claim} to be Bound")
        volume = self.volume(volume_name)
        assert volume is not None
        return volume

    def events(self, object_name: str) -> list[dict[str, Any]]:
        listed = call_json(
            self.core.list_event_for_all_namespaces,
            field_selector=f"involvedObject.name={object_name}",
        )
        return list(listed["items"])

    def wait_event(self, object_name: str, reason: str, timeout: float = 60) -> dict[str, Any]:
        def find() -> dict[str, Any] | None:
            for event in self.events(object_name):
                if event.get("reason") == reason:
                    return event
            return None

        return wait_for(find, timeout, f"a {reason} event on {object_name}")

    def node_path(self, node: str, path: str) -> Path:
        return self.cluster.node_dir(node) / path.lstrip("/")

    def cleanup(self) -> None:
        self.stop_all()
        for name in self.classes:
            with contextlib.suppress(ApiException):
                self.storage.delete_storage_class(name)
        with contextlib.suppress(ApiException):
            self.core.delete_namespace(self.namespace)


def eventually(probe: Callable[[], T | None], timeout: float, description: str) -> T:
    return wait_for(probe, timeout, description, interval=0.2)


def volume_node(volume: dict[str, Any]) -> str:
    terms = volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    return str(terms[0]["matchExpressions"][0]["values"][0])


def volume_path(volume: dict[str, Any]) -> str:
    source = volume["spec"].get("hostPath") or volume["spec"]["local"]
    return str(source["path"])


def wait_gone(probe: Callable[[], object], timeout: float, description: str) -> None:
    deadline = time.monotonic() + timeout
    while probe() is not None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {description}")
        time.sleep(0.2)
