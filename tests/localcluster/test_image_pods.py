"""Image-table pods run for real on the session cluster, as a kubelet would run them:
environment, ConfigMap volumes swapped atomically, the pod's own token and RBAC, probes,
restarts, graceful deletion, and a network namespace per pod."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from localcluster import LocalCluster, wait_for
from localcluster.pod_volumes import VolumeMaterializer
from localcluster.raw_api import call_json, manifest
from tests.localcluster.image_pods import (
    IMAGE,
    app_pod_spec,
    config_map,
    container_status,
    deployment,
    is_ready,
    pod,
    wait_for_log_line,
    wait_gone,
)
from tests.localcluster.pods import ordinary_pod

pytestmark = pytest.mark.cluster


def test_environment_field_refs_arguments_and_security_context(
    cluster: LocalCluster, cluster_namespace: str
) -> None:
    core = cluster.core_v1()
    core.create_namespaced_config_map(cluster_namespace, config_map("app", {}))
    spec = app_pod_spec(
        "app",
        args=["$(POD_NAME)", "$(GREETING)", "$$(POD_NAME)"],
        workingDir="/etc/app",
        securityContext={"readOnlyRootFilesystem": True},
        env=[
            *(
                {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}
                for name, path in (
                    ("POD_NAMESPACE", "metadata.namespace"),
                    ("POD_NAME", "metadata.name"),
                    ("POD_UID", "metadata.uid"),
                    ("NODE_NAME", "spec.nodeName"),
                    ("ACCOUNT", "spec.serviceAccountName"),
                    ("POD_IP", "status.podIP"),
                    ("HOST_IP", "status.hostIP"),
                )
            ),
            {"name": "GREETING", "value": "hello-$(POD_NAME)"},
        ],
    )
    spec["securityContext"] = {"runAsUser": 65532, "runAsGroup": 65533, "runAsNonRoot": True}
    created = cluster.create_pod(cluster_namespace, pod("env", spec))
    facts = wait_for_log_line(cluster, created, "listening ")
    running = cluster.wait_for_pod(cluster_namespace, "env", is_ready, description="Ready")
    env = facts["env"]
    assert env["POD_NAMESPACE"] == cluster_namespace
    assert env["POD_NAME"] == "env"
    assert env["POD_UID"] == created["metadata"]["uid"]
    assert env["NODE_NAME"] == running["spec"]["nodeName"] in cluster.nodes
    assert env["ACCOUNT"] == "default"
    assert env["POD_IP"] == running["status"]["podIP"]
    assert env["POD_IP"].startswith("127.")
    assert env["HOST_IP"] == running["status"]["hostIP"]
    assert env["GREETING"] == "hello-env"
    assert env["KUBERNETES_SERVICE_HOST"] == "127.0.0.1"
    assert env["KUBERNETES_SERVICE_PORT"] == cluster.server.rsplit(":", 1)[1]
    assert facts["argv"] == ["env", "hello-env", "$(POD_NAME)"]
    assert (facts["uid"], facts["gid"], facts["cwd"]) == (65532, 65533, "/etc/app")
    assert facts["root_writable"] is False


def test_a_config_map_change_swaps_the_data_link_and_readiness_follows_the_probe(
    cluster: LocalCluster, cluster_namespace: str
) -> None:
    core = cluster.core_v1()
    data = {"message": "first", "ready": "no"}
    core.create_namespaced_config_map(cluster_namespace, config_map("app", data))
    created = cluster.create_pod(cluster_namespace, pod("app", app_pod_spec("app")))
    first = wait_for_log_line(cluster, created, "config ", lambda seen: seen["data"] is not None)
    assert first["message"] == "first"
    assert first["entries"] == sorted([first["data"], "..data", "message", "ready"])
    running = cluster.wait_for_pod_phase(cluster_namespace, "app", ("Running",))
    assert not is_ready(running)  # kwok's pod-ready stage leaves it alone

    patch = manifest({"data": {"message": "second", "ready": "yes"}})
    core.patch_namespaced_config_map("app", cluster_namespace, patch)
    second = wait_for_log_line(
        cluster,
        created,
        "config ",
        lambda seen: seen["data"] != first["data"] and first["data"] not in seen["entries"],
    )
    assert second["message"] == "second"
    # The new version replaced the old one: one timestamped directory, the keys as links.
    assert second["entries"] == sorted([second["data"], "..data", "message", "ready"])
    ready = cluster.wait_for_pod(cluster_namespace, "app", is_ready, description="Ready")
    assert container_status(ready)["ready"] is True

    core.patch_namespaced_config_map("app", cluster_namespace, manifest({"data": {"ready": "no"}}))
    unready = cluster.wait_for_pod(
        cluster_namespace, "app", lambda found: not is_ready(found), description="not Ready"
    )
    assert container_status(unready)["ready"] is False
    assert container_status(unready)["restartCount"] == 0
    assert unready["status"]["phase"] == "Running"


TOKEN_CHECK = r"""
import json
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
config.load_incluster_config()
core = client.CoreV1Api()
folder = "/var/run/secrets/kubernetes.io/serviceaccount/"
namespace = open(folder + "namespace").read()
result = {"namespace": namespace, "files": sorted(__import__("os").listdir(folder))}
listed = core.list_namespaced_config_map(namespace).items
result["configmaps"] = sorted(item.metadata.name for item in listed)
try:
    core.list_namespaced_secret(namespace)
    result["secrets"] = "allowed"
except ApiException as error:
    result["secrets"] = error.status
body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
review = client.AuthenticationV1Api().create_self_subject_review(body)
result["user"] = review.status.user_info.username
result["extra"] = review.status.user_info.extra
print("result " + json.dumps(result), flush=True)
"""


def test_the_token_works_in_cluster_with_exactly_the_accounts_rights(
    cluster: LocalCluster, cluster_namespace: str
) -> None:
    core, rbac = cluster.core_v1(), cluster.rbac_v1()
    core.create_namespaced_service_account(
        cluster_namespace, manifest({"metadata": {"name": "reader"}})
    )
    rule = {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}
    rbac.create_namespaced_role(
        cluster_namespace, manifest({"metadata": {"name": "reader"}, "rules": [rule]})
    )
    binding = {
        "metadata": {"name": "reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": cluster_namespace}],
    }
    rbac.create_namespaced_role_binding(cluster_namespace, manifest(binding))
    spec = {
        "serviceAccountName": "reader",
        "restartPolicy": "Never",
        "containers": [{"name": "check", "image": IMAGE, "command": ["python", "-c", TOKEN_CHECK]}],
    }
    created = cluster.create_pod(cluster_namespace, pod("token", spec))
    done = cluster.wait_for_pod_phase(cluster_namespace, "token", ("Succeeded", "Failed"))
    assert done["status"]["phase"] == "Succeeded", done["status"]
    result = wait_for_log_line(cluster, created, "result ")
    assert result["namespace"] == cluster_namespace
    assert {"token", "ca.crt", "namespace", "..data"} <= set(result["files"])
    assert "kube-root-ca.crt" in result["configmaps"]
    assert result["secrets"] == 403
    assert result["user"] == f"system:serviceaccount:{cluster_namespace}:reader"
    # A bound token, as the kubelet requests it: it names the pod it belongs to.
    assert result["extra"]["authentication.kubernetes.io/pod-name"] == ["token"]


def last_terminated(found: dict[str, Any]) -> dict[str, Any]:
    terminated: dict[str, Any] = container_status(found).get("lastState", {}).get("terminated", {})
    return terminated


def test_a_crashing_container_restarts_with_back_off_and_others_keep_running(
    cluster: LocalCluster, cluster_namespace: str
) -> None:
    crash = {
        "name": "crash",
        "image": IMAGE,
        "command": ["python", "-c", "print('crashing'); raise SystemExit(3)"],
    }
    missing = {"name": "missing", "image": IMAGE, "command": ["no-such-command"]}
    created = cluster.create_pod(cluster_namespace, pod("crash", {"containers": [crash]}))
    cluster.create_pod(cluster_namespace, pod("missing", {"containers": [missing]}))

    def backing_off(found: dict[str, Any]) -> bool:
        status = container_status(found)
        waiting = status.get("state", {}).get("waiting", {})
        return bool(waiting.get("reason") == "CrashLoopBackOff" and status["restartCount"] >= 1)

    crashed = cluster.wait_for_pod(cluster_namespace, "crash", backing_off, description="back-off")
    status = container_status(crashed)
    assert status["lastState"]["terminated"]["exitCode"] == 3
    assert status["lastState"]["terminated"]["reason"] == "Error"
    assert "back-off 10s restarting failed container=crash" in status["state"]["waiting"]["message"]
    assert crashed["status"]["phase"] == "Running"
    log = wait_for_log_line(cluster, created, "----- localcluster: restart 1 ")
    assert log.startswith("at ")
    text = cluster.pod_log_path(cluster_namespace, "crash", created["metadata"]["uid"]).read_text()
    assert text.count("crashing\n") == 2

    failed = cluster.wait_for_pod(
        cluster_namespace,
        "missing",
        lambda found: bool(last_terminated(found)),
        description="restart",
    )
    terminated = last_terminated(failed)
    assert (terminated["exitCode"], terminated["reason"]) == (128, "StartError")
    assert "no-such-command" in terminated["message"]
    # The runner still runs new pods.
    core = cluster.core_v1()
    core.create_namespaced_config_map(cluster_namespace, config_map("app", {}))
    spec = app_pod_spec("app")
    cluster.create_pod(cluster_namespace, pod("healthy", spec))
    cluster.wait_for_pod(cluster_namespace, "healthy", is_ready, description="Ready")


def test_a_failing_liveness_probe_restarts_the_container(
    cluster: LocalCluster, cluster_namespace: str
) -> None:
    core = cluster.core_v1()
    data = {"alive": "no", "on-sigterm": "exit"}
    core.create_namespaced_config_map(cluster_namespace, config_map("app", data))
    liveness = {
        "httpGet": {"path": "/healthz", "port": 8080},
        "initialDelaySeconds": 1,
        "periodSeconds": 1,
        "failureThreshold": 2,
    }
    created = cluster.create_pod(
        cluster_namespace, pod("live", app_pod_spec("app", livenessProbe=liveness))
    )
    restarted = cluster.wait_for_pod(
        cluster_namespace,
        "live",
        lambda found: container_status(found).get("restartCount", 0) >= 1,
        description="a restart",
    )
    last = container_status(restarted)["lastState"]["terminated"]
    assert (last["exitCode"], last["reason"]) == (0, "Completed")  # it exited on SIGTERM
    assert wait_for_log_line(cluster, created, "got SIGTERM") == ""


def test_deletion_sends_sigterm_and_kills_after_the_grace_period(
    cluster: LocalCluster, cluster_namespace: str
) -> None:
    core = cluster.core_v1()
    core.create_namespaced_config_map(cluster_namespace, config_map("stubborn", {}))
    core.create_namespaced_config_map(
        cluster_namespace, config_map("polite", {"on-sigterm": "exit"})
    )
    created = {}
    for name in ("stubborn", "polite"):
        spec = app_pod_spec(name)
        spec["terminationGracePeriodSeconds"] = 4
        created[name] = cluster.create_pod(cluster_namespace, pod(name, spec))
    for found in created.values():
        wait_for_log_line(cluster, found, "listening ")
    deleted_at = time.monotonic()
    for name in created:
        core.delete_namespaced_pod(name, cluster_namespace)
    polite = wait_gone(cluster, cluster_namespace, "polite", 30) - deleted_at
    stubborn = wait_gone(cluster, cluster_namespace, "stubborn", 30) - deleted_at
    assert polite < 3.0, "a container that exits on SIGTERM must not wait out its grace"
    assert 4.0 <= stubborn < 12.0, "SIGKILL comes once the grace period has passed"
    for found in created.values():
        assert wait_for_log_line(cluster, found, "got SIGTERM") == ""


def test_two_replicas_listen_on_the_same_port_and_a_scale_down_stops_one(
    cluster: LocalCluster, cluster_namespace: str
) -> None:
    core = cluster.core_v1()
    core.create_namespaced_config_map(cluster_namespace, config_map("app", {"on-sigterm": "exit"}))
    apps = client.AppsV1Api(cluster.admin_client)
    apps.create_namespaced_deployment(cluster_namespace, deployment("pair", 2, app_pod_spec("app")))

    def ready_pods() -> list[dict[str, Any]] | None:
        pods = call_json(core.list_namespaced_pod, cluster_namespace, label_selector="app=pair")[
            "items"
        ]
        ready = [found for found in pods if is_ready(found)]
        return ready if len(ready) == 2 else None

    pods = wait_for(ready_pods, 90, "two Ready replicas")
    assert len({found["status"]["podIP"] for found in pods}) == 2
    for found in pods:
        facts = wait_for_log_line(cluster, found, "listening ")
        assert facts["env"]["HOSTNAME"] == found["metadata"]["name"]
    apps.patch_namespaced_deployment_scale(
        "pair", cluster_namespace, manifest({"spec": {"replicas": 1}})
    )

    def one_left() -> list[str] | None:
        pods = call_json(core.list_namespaced_pod, cluster_namespace, label_selector="app=pair")[
            "items"
        ]
        names = [found["metadata"]["name"] for found in pods]
        return names if len(names) == 1 else None

    (left,) = wait_for(one_left, 60, "the replica set to delete one pod")
    stopped = next(found for found in pods if found["metadata"]["name"] != left)
    assert wait_for_log_line(cluster, stopped, "got SIGTERM") == ""
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_pod(stopped["metadata"]["name"], cluster_namespace)
    assert gone.value.status == 404


def test_a_projected_token_is_made_once_bound_to_its_pod_and_outlives_any_test(
    cluster: LocalCluster, cluster_namespace: str, tmp_path: Path
) -> None:
    """The harness never renews a pod's token: that holds because the API server extends the
    kube-api-access token's 3607 s to a year."""
    holder = cluster.create_pod(cluster_namespace, ordinary_pod("holder"))  # tokens bind to it
    volumes = VolumeMaterializer(cluster.core_v1(), holder, tmp_path)
    source = {"sources": [{"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}}]}
    first = volumes.volume_files("projected", source)
    assert volumes.volume_files("projected", source) == first
    token = first[0][1].decode()
    payload = token.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    assert claims["exp"] - claims["iat"] > 300 * 24 * 3600, claims
    with cluster.client_for_token(token) as api:
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        authentication = client.AuthenticationV1Api(api)
        review = call_json(authentication.create_self_subject_review, manifest(body))
    user = review["status"]["userInfo"]
    assert user["username"] == f"system:serviceaccount:{cluster_namespace}:default"
    assert user["extra"]["authentication.kubernetes.io/pod-name"] == ["holder"]
