"""Every Helm-style knob set in one stack, `pulumi up` against the local cluster, and each seen
on the objects the real API server holds; the provisioner deployed that way still binds claims
(from its renamed ConfigMap), and `destroy` leaves the existing namespace it was given."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from localcluster import LocalCluster, wait_for
from tests.engine.support import (
    StackFactory,
    StackNames,
    Tenant,
    api_get,
    api_request,
    base_config,
    error_lines,
    volume_location,
    wait_provisioner_ready,
)

SERVICE_MONITOR_CRD = "servicemonitors.monitoring.coreos.com"
CRD_PATH = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{SERVICE_MONITOR_CRD}"


def service_monitor_crd() -> dict[str, Any]:
    """The Prometheus Operator's ServiceMonitor CRD, reduced to what the API server needs to
    store one (the operator's own CRD has the full schema)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": SERVICE_MONITOR_CRD},
        "spec": {
            "group": "monitoring.coreos.com",
            "scope": "Namespaced",
            "names": {
                "plural": "servicemonitors",
                "singular": "servicemonitor",
                "kind": "ServiceMonitor",
                "listKind": "ServiceMonitorList",
            },
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


@pytest.fixture
def with_service_monitor_crd(cluster: LocalCluster) -> Iterator[None]:
    status, answer = api_request(
        cluster, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        service_monitor_crd(),
    )  # fmt: skip
    assert status == 201, answer

    def established() -> bool | None:
        crd = api_get(cluster, CRD_PATH) or {}
        conditions = (crd.get("status") or {}).get("conditions") or []
        done = any(c["type"] == "Established" and c["status"] == "True" for c in conditions)
        return True if done else None

    wait_for(established, 30, "the ServiceMonitor CRD established")
    yield
    api_request(cluster, "DELETE", CRD_PATH)
    wait_for(
        lambda: True if api_get(cluster, CRD_PATH) is None else None,
        30,
        "the ServiceMonitor CRD gone",
    )


def knobs_config(names: StackNames) -> dict[str, Any]:
    """base_config with every knob set; the node selector and affinity match the harness's kwok
    nodes (localcluster/nodes.py labels each `type: kwok`)."""
    config = base_config(names)
    config["storageClasses"].append(
        {"name": f"fixed-{names.suffix}", "allowVolumeExpansion": False}
    )
    return {
        **config,
        "createNamespace": False,
        "configMapName": f"config-{names.suffix}",
        "provisioningRetryCount": 4,
        "deletionRetryCount": 0,
        "priorityClassName": f"storage-{names.suffix}",
        "nodeSelector": {"type": "kwok"},
        "tolerations": [
            {"key": "dedicated", "operator": "Equal", "value": "storage", "effect": "NoSchedule"}
        ],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}
                            ]
                        }
                    ]
                }
            }
        },
        "imagePullSecrets": ["regcred"],
        "podAnnotations": {"example.com/owner": "storage-team"},
        "podLabels": {"team": "storage"},
        "commonLabels": {"cost-center": "platform"},
        "serviceAccount": {"annotations": {"iam.gke.io/gcp-service-account": "lps@p.iam"}},
        "updateStrategy": {"type": "Recreate"},
        "metrics": {"service": {"enabled": True}, "serviceMonitor": {"enabled": True}},
    }


def test_every_knob_reaches_the_api_server_and_the_provisioner_still_works(
    stacks: StackFactory, cluster: LocalCluster, with_service_monitor_crd: None
) -> None:
    names = StackNames.fresh()
    namespace = names.namespace
    # The existing namespace, as a platform team would hand it over (helper pods mount hostPath).
    cluster.create_namespace(namespace)
    status, answer = api_request(
        cluster, "PATCH", f"/api/v1/namespaces/{namespace}",
        {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "privileged"}}},
        content_type="application/merge-patch+json",
    )  # fmt: skip
    assert status == 200, answer
    priority_class = f"storage-{names.suffix}"
    status, answer = api_request(
        cluster, "POST", "/apis/scheduling.k8s.io/v1/priorityclasses",
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
         "metadata": {"name": priority_class}, "value": 1000000},
    )  # fmt: skip
    assert status == 201, answer
    try:
        stack = stacks.create(knobs_config(names), names)
        stack.up()
        (pod,) = wait_provisioner_ready(cluster, namespace)
        check_deployed_objects(cluster, names, pod)

        tenant = Tenant(cluster, names.class_name)
        tenant.claim_with_consumer("first")
        _, _, on_disk = volume_location(cluster, tenant.wait_bound("first"))
        assert on_disk.is_dir()

        stack.destroy()
        kept = api_get(cluster, f"/api/v1/namespaces/{namespace}")
        assert kept is not None
        assert "deletionTimestamp" not in kept["metadata"]
        assert kept["status"]["phase"] == "Active"
        deployments = api_get(cluster, f"/apis/apps/v1/namespaces/{namespace}/deployments")
        assert deployments is not None
        assert deployments["items"] == []
    finally:
        api_request(
            cluster, "DELETE", f"/apis/scheduling.k8s.io/v1/priorityclasses/{priority_class}"
        )
        api_request(cluster, "DELETE", f"/api/v1/namespaces/{namespace}")


def check_deployed_objects(cluster: LocalCluster, names: StackNames, pod: dict[str, Any]) -> None:
    namespace = names.namespace
    base = f"/api/v1/namespaces/{namespace}"
    deployment = api_get(
        cluster, f"/apis/apps/v1/namespaces/{namespace}/deployments/local-path-storage-provisioner"
    )
    assert deployment is not None
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    spec = pod["spec"]
    assert spec["nodeSelector"] == {"type": "kwok"}
    assert {"key": "dedicated", "operator": "Equal", "value": "storage",
            "effect": "NoSchedule"} in spec["tolerations"]  # fmt: skip
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["key"] == "kubernetes.io/os"
    assert spec["priorityClassName"] == f"storage-{names.suffix}"
    assert spec["priority"] == 1000000
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["metadata"]["annotations"]["example.com/owner"] == "storage-team"
    assert pod["metadata"]["labels"]["team"] == "storage"
    assert pod["metadata"]["labels"]["cost-center"] == "platform"
    (container,) = spec["containers"]
    assert "--provisioning-retry-count=4" in container["args"]
    assert "--deletion-retry-count=0" in container["args"]
    assert f"--configmap-name=config-{names.suffix}" in container["args"]
    assert {"name": "config", "configMap": {"name": f"config-{names.suffix}",
            "defaultMode": 420}} in spec["volumes"]  # fmt: skip

    config_map = api_get(cluster, f"{base}/configmaps/config-{names.suffix}")
    assert config_map is not None
    assert "config.json" in config_map["data"]
    assert api_get(cluster, f"{base}/configmaps/local-path-config") is None

    account = api_get(cluster, f"{base}/serviceaccounts/local-path-storage-provisioner")
    assert account is not None
    assert account["metadata"]["annotations"]["iam.gke.io/gcp-service-account"] == "lps@p.iam"

    cluster_role = api_get(
        cluster, f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{namespace}:provisioner"
    )
    storage_class = api_get(cluster, f"/apis/storage.k8s.io/v1/storageclasses/{names.class_name}")
    fixed_class = api_get(cluster, f"/apis/storage.k8s.io/v1/storageclasses/fixed-{names.suffix}")
    service = api_get(cluster, f"{base}/services/local-path-storage-metrics")
    monitor = api_get(
        cluster,
        f"/apis/monitoring.coreos.com/v1/namespaces/{namespace}/servicemonitors/"
        "local-path-storage-metrics",
    )
    labelled = [deployment, config_map, account, cluster_role, storage_class, service, monitor]
    for found in labelled:
        assert found is not None
        assert found["metadata"]["labels"]["cost-center"] == "platform", found["kind"]
    assert storage_class is not None and storage_class["allowVolumeExpansion"] is True
    assert fixed_class is not None and fixed_class["allowVolumeExpansion"] is False

    assert service is not None
    assert service["spec"]["ports"][0]["port"] == 8080
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert monitor is not None
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics"}]

    # The harness gives pods loopback IPs, which EndpointSlices refuse; so the Service's
    # selector is evaluated by the API server itself, and its target port is the container's
    # metrics port (the one the probes reach).
    selector = ",".join(f"{key}%3D{value}" for key, value in service["spec"]["selector"].items())
    selected = api_get(cluster, f"{base}/pods?labelSelector={selector}")
    assert selected is not None
    assert [p["metadata"]["name"] for p in selected["items"]] == [pod["metadata"]["name"]]
    assert {"name": "metrics", "containerPort": 8080, "protocol": "TCP"} in container["ports"]
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"
    assert container["readinessProbe"]["httpGet"]["port"] == "metrics"


def test_a_service_monitor_without_its_crd_fails_preview_before_any_change(
    stacks: StackFactory, cluster: LocalCluster
) -> None:
    assert api_get(cluster, CRD_PATH) is None
    names = StackNames.fresh()
    config = {
        **base_config(names),
        "metrics": {"service": {"enabled": True}, "serviceMonitor": {"enabled": True}},
    }
    stack = stacks.create(config, names)
    output = stack.failed_preview()
    assert SERVICE_MONITOR_CRD in output, output
    assert any(SERVICE_MONITOR_CRD in line for line in error_lines(output)), output
    assert api_get(cluster, f"/api/v1/namespaces/{names.namespace}") is None


def test_a_bad_knob_fails_preview_with_one_line_naming_the_key(stacks: StackFactory) -> None:
    names = StackNames.fresh()
    config = {**base_config(names), "podLabels": {"app.kubernetes.io/name": "other"}}
    output = stacks.create(config, names).failed_preview()
    assert error_lines(output) == [
        'error: stack config local-path-storage:podLabels["app.kubernetes.io/name"]: selects '
        "the provisioner's pods: the stack sets it"
    ], output
