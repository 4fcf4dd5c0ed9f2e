"""End to end through the image table: the provisioner's Deployment, as components/ declares
it (namespace, accounts, RBAC from components.rbac, ConfigMap, and the pod template of
components/deployment.py itself), runs the real `local-path-storage-provisioner` in a pod, from
the built image's root filesystem and nothing of the host's Python; a WaitForFirstConsumer claim
binds and its directory appears on the node; releasing it removes the directory. An image
missing a library the provisioner imports makes the pod crash-loop with the ImportError."""

from __future__ import annotations

import json
import re
import shutil
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from components import naming, rbac
from components.args import ConfigMapFiles, ProvisionerDeploymentArgs
from components.deployment import pod_template
from localcluster import (
    PROVISIONER_IMAGE_REPOSITORY,
    ClusterOptions,
    LocalCluster,
    NodeSpec,
    RestartBackoff,
    wait_for,
)
from localcluster.image_table import CHECKOUT
from localcluster.raw_api import call_json, manifest
from provisioner.configuration.config import (
    DEFAULT_HELPER_POD_YAML,
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
)
from tests.localcluster.image_pods import container_status, is_ready, log_of

pytestmark = pytest.mark.cluster

NODE_PATH = "/opt/lps-deployed"
IMAGE_SITE_PACKAGES = "usr/local/lib/python3.11/dist-packages"


def _rules(rules: tuple[rbac.PolicyRule, ...]) -> list[dict[str, Any]]:
    return [
        {
            "apiGroups": [rule.api_group],
            "resources": list(rule.resources),
            "verbs": list(rule.verbs),
        }
        for rule in rules
    ]


def _camel(value: Any) -> Any:
    """Pulumi's snake_case input keys as the API spells them (`http_get` -> `httpGet`)."""
    if isinstance(value, dict):
        return {
            re.sub(r"_([a-z])", lambda match: match.group(1).upper(), key): _camel(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_camel(item) for item in value]
    return value


class Installation:
    """The objects components/deployment.py and a StorageClass declare, created for real."""

    def __init__(self, cluster: LocalCluster) -> None:
        suffix = uuid.uuid4().hex[:6]
        self.cluster = cluster
        self.namespace = f"deployed-{suffix}"
        self.provisioner_name = f"deployed-{suffix}.lps.io/local-path"
        self.storage_class = f"deployed-{suffix}"
        self.cluster_scoped = naming.cluster_scoped_name(self.namespace)
        config = {
            "nodePathMap": [
                {
                    "node": "DEFAULT_PATH_FOR_NON_LISTED_NODES",
                    # Not there beforehand on the test's nodes: the helpers may create it.
                    "paths": [{"path": NODE_PATH, "create": True}],
                }
            ]
        }
        files = ConfigMapFiles(
            json.dumps(config),
            DEFAULT_SETUP_SCRIPT,
            DEFAULT_TEARDOWN_SCRIPT,
            DEFAULT_HELPER_POD_YAML,
        )
        # The default image (naming.DEFAULT_IMAGE): the image table's entry.
        self.args = ProvisionerDeploymentArgs(
            config_files=files,
            namespace=self.namespace,
            provisioner_name=self.provisioner_name,
            workers=2,
        )
        self.template = _camel(pod_template(self.args, "deployed"))

    def create(self) -> None:
        core, access = self.cluster.core_v1(), self.cluster.rbac_v1()
        namespace, account = self.namespace, naming.PROVISIONER_SERVICE_ACCOUNT
        labels = {"pod-security.kubernetes.io/enforce": "privileged"}
        core.create_namespace(manifest({"metadata": {"name": namespace, "labels": labels}}))
        core.create_namespaced_service_account(namespace, manifest({"metadata": {"name": account}}))
        helper = {"metadata": {"name": naming.HELPER_SERVICE_ACCOUNT}}
        core.create_namespaced_service_account(
            namespace, manifest({**helper, "automountServiceAccountToken": False})
        )
        subject = {"kind": "ServiceAccount", "name": account, "namespace": namespace}
        access.create_cluster_role(
            manifest(
                {"metadata": {"name": self.cluster_scoped}, "rules": _rules(rbac.CLUSTER_RULES)}
            )
        )
        access.create_cluster_role_binding(
            manifest(
                {
                    "metadata": {"name": self.cluster_scoped},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": self.cluster_scoped,
                    },
                    "subjects": [subject],
                }
            )
        )
        access.create_namespaced_role(
            namespace,
            manifest({"metadata": {"name": account}, "rules": _rules(rbac.NAMESPACE_RULES)}),
        )
        access.create_namespaced_role_binding(
            namespace,
            manifest(
                {
                    "metadata": {"name": account},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "Role",
                        "name": account,
                    },
                    "subjects": [subject],
                }
            ),
        )
        data = self.args.config_files.to_data()
        core.create_namespaced_config_map(
            namespace, manifest({"metadata": {"name": naming.CONFIG_MAP_NAME}, "data": data})
        )
        self.cluster.storage_v1().create_storage_class(
            manifest(
                {
                    "metadata": {"name": self.storage_class},
                    "provisioner": self.provisioner_name,
                    "reclaimPolicy": "Delete",
                    "volumeBindingMode": "WaitForFirstConsumer",
                }
            )
        )
        deployment = {
            "metadata": {"name": "local-path-storage-provisioner"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": naming.selector_labels("deployed")},
                "template": self.template,
            },
        }
        client.AppsV1Api(self.cluster.admin_client).create_namespaced_deployment(
            namespace, manifest(deployment)
        )

    def delete(self) -> None:
        core, storage, access = (
            self.cluster.core_v1(),
            self.cluster.storage_v1(),
            self.cluster.rbac_v1(),
        )
        removals: list[Callable[[], object]] = [
            lambda: core.delete_namespace(self.namespace),
            lambda: storage.delete_storage_class(self.storage_class),
            lambda: access.delete_cluster_role_binding(self.cluster_scoped),
            lambda: access.delete_cluster_role(self.cluster_scoped),
        ]
        for remove in removals:
            try:
                remove()
            except ApiException as error:
                if error.status != 404:
                    raise


@pytest.fixture
def installation(cluster: LocalCluster) -> Iterator[Installation]:
    installed = Installation(cluster)
    try:
        installed.create()
        yield installed
    finally:
        installed.delete()


def test_the_deployed_provisioner_runs_in_its_pod_and_binds_a_claim(
    cluster: LocalCluster, installation: Installation
) -> None:
    core, namespace = cluster.core_v1(), installation.namespace

    def provisioner_pod() -> dict[str, Any] | None:
        selector = ",".join(f"{k}={v}" for k, v in naming.selector_labels("deployed").items())
        pods = call_json(core.list_namespaced_pod, namespace, label_selector=selector)
        ready = [found for found in pods["items"] if is_ready(found)]
        return ready[0] if ready else None

    running = wait_for(provisioner_pod, 120, "the provisioner's pod to be Ready")
    assert container_status(running)["restartCount"] == 0
    assert_runs_from_the_image(cluster, installation)
    claim = {
        "metadata": {"name": "data"},
        "spec": {
            "storageClassName": installation.storage_class,
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    core.create_namespaced_persistent_volume_claim(namespace, manifest(claim))
    consumer = {
        "metadata": {"name": "app"},
        "spec": {
            "containers": [{"name": "app", "image": "registry.invalid/app:1"}],
            "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}],
        },
    }
    core.create_namespaced_pod(namespace, manifest(consumer))
    log = log_of(cluster, running)

    def bound() -> str | None:
        found = call_json(core.read_namespaced_persistent_volume_claim, "data", namespace)
        if found.get("status", {}).get("phase") == "Bound":
            return str(found["spec"]["volumeName"])
        return None

    try:
        volume_name = wait_for(bound, 90, "the claim to bind")
    except TimeoutError:
        pytest.fail(f"claim not bound; provisioner log:\n{log.read_text()[-3000:]}")
    volume = call_json(core.read_persistent_volume, volume_name)
    node = volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]
    path = (volume["spec"].get("hostPath") or volume["spec"].get("local"))["path"]
    assert path.startswith(f"{NODE_PATH}/")
    directory = cluster.node_dir(node["values"][0]) / path.lstrip("/")
    assert directory.is_dir()
    output = log.read_text()
    assert "credentials: in-cluster service account" in output, output[-3000:]
    # A refused request logs its status and reason ("403 Forbidden"); the bare number may stand
    # in a random lease identity.
    assert "Forbidden" not in output, output[-3000:]

    core.delete_namespaced_pod("app", namespace, grace_period_seconds=0)
    core.delete_namespaced_persistent_volume_claim("data", namespace)

    def removed() -> bool | None:
        return True if not directory.exists() else None

    wait_for(removed, 90, f"{directory} to be removed after the claim is released")


def _provisioner_process(provisioner_name: str) -> psutil.Process:
    """The container's process: the image's interpreter running the entry point for this
    installation's provisioner name."""
    flag = f"--provisioner-name={provisioner_name}"
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if flag in cmdline and any(
            part.endswith("local-path-storage-provisioner") for part in cmdline
        ):
            return process
    raise AssertionError(f"no provisioner process for {provisioner_name}")


def assert_runs_from_the_image(cluster: LocalCluster, installation: Installation) -> None:
    """The pod's process sees the image's root filesystem, runs as the Deployment's user, and
    nothing of the harness's virtualenv or checkout is mounted or named in its environment."""
    image_root = cluster.image_table.entries[PROVISIONER_IMAGE_REPOSITORY].root
    assert image_root is not None
    process = _provisioner_process(installation.provisioner_name)
    seen = Path(f"/proc/{process.pid}/root")
    entry_point = "usr/local/bin/local-path-storage-provisioner"
    assert (seen / entry_point).read_bytes() == (image_root / entry_point).read_bytes()
    assert (seen / "etc/passwd").read_bytes() == (image_root / "etc/passwd").read_bytes()
    # The image has no shell (its /bin holds coreutils, for the node plugin's clone copies):
    # the host's /bin, which has one, is not what the pod sees.
    for shell in ("bin/sh", "bin/bash", "bin/dash", "usr/bin/sh"):
        assert not (seen / shell).exists(), f"the pod sees a shell at /{shell}"
    assert sorted(p.name for p in (seen / "bin").iterdir()) == sorted(
        p.name for p in (image_root / "bin").iterdir()
    )
    assert not (seen / sys.prefix.lstrip("/")).exists()
    mountinfo = Path(f"/proc/{process.pid}/mountinfo").read_text()
    (root_mount,) = [line for line in mountinfo.splitlines() if line.split()[4] == "/"]
    assert f"lowerdir={image_root}," in root_mount, root_mount
    for harness_path in (sys.prefix, sys.base_prefix, str(CHECKOUT)):
        assert harness_path not in mountinfo, mountinfo
    environment = process.environ()
    assert "PYTHONPATH" not in environment
    assert environment["PATH"] == "/usr/local/bin:/usr/bin"
    assert process.uids().real == process.gids().real == 65532
    # The image's interpreter, seen from here through the pod's root.
    interpreter = Path(process.exe())
    assert interpreter.is_relative_to(cluster.dir / "pods"), interpreter
    assert interpreter.parts[-3:] == ("usr", "bin", "python3.11"), interpreter


def test_an_image_without_a_library_it_needs_crash_loops_with_the_import_error(
    tmp_path: Path, cluster: LocalCluster
) -> None:
    built = cluster.image_table.entries[PROVISIONER_IMAGE_REPOSITORY]
    assert built.root is not None
    broken_root = tmp_path / "rootfs"
    shutil.copytree(built.root, broken_root, symlinks=True)
    shutil.rmtree(broken_root / IMAGE_SITE_PACKAGES / "yaml")
    options = ClusterOptions(
        nodes=(NodeSpec("solo"),),
        parent_dir=tmp_path,
        announce=False,
        restart_backoff=RestartBackoff(initial_seconds=0.2, max_seconds=0.4),
        images={PROVISIONER_IMAGE_REPOSITORY: replace(built, root=broken_root)},
    )
    with LocalCluster.start(options) as broken_cluster:
        installation = Installation(broken_cluster)
        installation.create()
        core, namespace = broken_cluster.core_v1(), installation.namespace

        def crash_looping() -> dict[str, Any] | None:
            pods = call_json(core.list_namespaced_pod, namespace)["items"]
            looping = [p for p in pods if container_status(p).get("restartCount", 0) >= 2]
            return looping[0] if looping else None

        found = wait_for(crash_looping, 90, "the provisioner's pod to restart twice")
        status = container_status(found)
        assert status["lastState"]["terminated"]["exitCode"] == 1
        assert not is_ready(found)
        log = log_of(broken_cluster, found).read_text()
        assert "ModuleNotFoundError: No module named 'yaml'" in log, log[-3000:]
