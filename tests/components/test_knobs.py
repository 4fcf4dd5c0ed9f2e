"""The Helm-style knobs of the provisioner's objects: each set in a stack and seen on what the
program registers (mock engine), and each bad value refused with one line naming its key."""

from __future__ import annotations

from typing import Any

import pytest

from components.args import MetricsExposure, UpdateStrategy
from components.program import run
from components.settings import parse_settings
from components.stack_values import SettingsError
from policy import default_class, helper_pods, provisioner_config, rbac, storage_paths
from policy.resources import Resource
from tests.components.mocked_engine import Registration, Run, run_mocked
from tests.components.test_settings import PREFIX, dev_with, one_class

SERVICE = "kubernetes:core/v1:Service"
SERVICE_MONITOR = "kubernetes:monitoring.coreos.com/v1:ServiceMonitor"
CRD = "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition"
NAMESPACE = "kubernetes:core/v1:Namespace"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
SERVICE_ACCOUNT = "kubernetes:core/v1:ServiceAccount"
STORAGE_CLASS = "kubernetes:storage.k8s.io/v1:StorageClass"

TOLERATIONS: list[dict[str, Any]] = [
    {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "dedicated", "operator": "Equal", "value": "storage", "effect": "NoExecute",
     "tolerationSeconds": 30},
]  # fmt: skip
AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "type", "operator": "In", "values": ["kwok"]}]}
            ]
        }
    }
}
KNOBS: dict[str, Any] = {
    "namespace": "storage-system",
    "createNamespace": False,
    "configMapName": "provisioner-config",
    "provisioningRetryCount": 3,
    "deletionRetryCount": 0,
    "priorityClassName": "storage-critical",
    "nodeSelector": {"type": "kwok"},
    "tolerations": TOLERATIONS,
    "affinity": AFFINITY,
    "imagePullSecrets": ["regcred", {"name": "mirror"}],
    "podAnnotations": {"example.com/scrape": "yes"},
    "podLabels": {"team": "storage"},
    "commonLabels": {"cost-center": "platform"},
    "serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/x"}},
    "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0,
                                                                  "maxSurge": "50%"}},
    "metrics": {"service": {"enabled": True}, "serviceMonitor": {"enabled": True}},
    "storageClasses": [
        {"name": "local-path-storage", "isDefault": True},
        {"name": "fixed-size", "allowVolumeExpansion": False},
    ],
}  # fmt: skip
"""Every knob set, as a stack file would."""


def knobs_run(**overrides: Any) -> Run:
    result = run_mocked(dev_with(**{**KNOBS, **overrides}), run, stack="dev")
    assert result.error is None, result.error
    return result


def kubernetes_objects(result: Run) -> list[Registration]:
    return [r for r in result.registrations if r.type.startswith("kubernetes:") and r.inputs]


def test_knobs_reach_the_settings() -> None:
    deployment = parse_settings(dev_with(**KNOBS)).deployment
    assert deployment.create_namespace is False
    assert deployment.config_map_name == "provisioner-config"
    assert deployment.image_pull_secrets == ("regcred", "mirror")
    assert deployment.update_strategy == UpdateStrategy("RollingUpdate", 0, "50%")
    assert deployment.metrics == MetricsExposure(service=True, service_monitor=True)
    assert deployment.look_up_service_monitor_crd is True
    rendering = parse_settings(dev_with(**KNOBS, renderYamlToDirectory="out")).deployment
    assert rendering.look_up_service_monitor_crd is False


def test_the_pod_template_carries_the_pod_knobs() -> None:
    deployment = knobs_run().one(DEPLOYMENT).inputs
    template = deployment["spec"]["template"]
    spec = template["spec"]
    assert spec["nodeSelector"] == {"type": "kwok"}
    assert spec["priorityClassName"] == "storage-critical"
    assert spec["imagePullSecrets"] == [{"name": "regcred"}, {"name": "mirror"}]
    assert spec["affinity"] == AFFINITY
    assert [
        {**t, "tolerationSeconds": t.get("tolerationSeconds")} for t in spec["tolerations"]
    ] == [{**t, "tolerationSeconds": t.get("tolerationSeconds")} for t in TOLERATIONS]
    assert template["metadata"]["annotations"] == {"example.com/scrape": "yes"}
    labels = template["metadata"]["labels"]
    assert labels["team"] == "storage"
    assert labels["cost-center"] == "platform"
    assert labels["app.kubernetes.io/name"] == "local-path-storage"
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 0, "maxSurge": "50%"},
    }
    (container,) = spec["containers"]
    assert "--provisioning-retry-count=3" in container["args"]
    assert "--deletion-retry-count=0" in container["args"]


def test_the_config_map_name_is_the_runtimes() -> None:
    result = knobs_run()
    assert result.one(CONFIG_MAP).inputs["metadata"]["name"] == "provisioner-config"
    spec = result.one(DEPLOYMENT).inputs["spec"]["template"]["spec"]
    assert {"name": "config", "configMap": {"name": "provisioner-config"}} in spec["volumes"]
    assert "--configmap-name=provisioner-config" in spec["containers"][0]["args"]
    assert result.outputs["configMapName"] == "provisioner-config"


def test_an_existing_namespace_is_used_not_created() -> None:
    result = knobs_run()
    assert result.of_type(NAMESPACE) == []
    for registration in kubernetes_objects(result):
        metadata = registration.inputs["metadata"]
        if "namespace" in metadata:
            assert metadata["namespace"] == "storage-system", registration.name
    assert result.outputs["namespace"] == "storage-system"
    created = run_mocked(dev_with(namespace="storage-system"), run, stack="dev")
    assert created.one(NAMESPACE).inputs["metadata"]["name"] == "storage-system"


def test_common_labels_are_on_every_object() -> None:
    objects = kubernetes_objects(knobs_run())
    assert {r.type for r in objects} >= {DEPLOYMENT, CONFIG_MAP, SERVICE, STORAGE_CLASS}
    for registration in objects:
        labels = registration.inputs["metadata"]["labels"]
        assert labels["cost-center"] == "platform", registration.name
        assert labels["app.kubernetes.io/instance"] == "local-path-storage", registration.name


def test_service_account_annotations() -> None:
    accounts = {
        r.inputs["metadata"]["name"]: r.inputs for r in knobs_run().of_type(SERVICE_ACCOUNT)
    }
    assert accounts["local-path-storage-provisioner"]["metadata"]["annotations"] == {
        "eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/x",
        "pulumi.com/patchForce": "true",
    }
    # The helper pods' account gets no cloud identity.
    assert accounts["local-path-storage-helper"]["metadata"]["annotations"] == {
        "pulumi.com/patchForce": "true"
    }


def test_the_metrics_service_selects_the_provisioner_pods() -> None:
    result = knobs_run()
    service = result.one(SERVICE).inputs
    pod_labels = result.one(DEPLOYMENT).inputs["spec"]["template"]["metadata"]["labels"]
    assert service["metadata"]["name"] == "local-path-storage-metrics"
    assert service["metadata"]["namespace"] == "storage-system"
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"}
    ]
    monitor = result.one(SERVICE_MONITOR)
    assert monitor.inputs["spec"]["selector"]["matchLabels"].items() <= (
        service["metadata"]["labels"].items()
    )
    assert monitor.inputs["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics"}]


def test_the_service_monitor_waits_for_its_crd_read_unless_rendering() -> None:
    applying = knobs_run()
    assert applying.reads == [
        (CRD, "local-path-storage-servicemonitor-crd", "servicemonitors.monitoring.coreos.com")
    ]
    rendering = knobs_run(renderYamlToDirectory="out")
    assert rendering.reads == []
    assert len(rendering.of_type(SERVICE_MONITOR)) == 1


def test_metrics_objects_only_when_asked_for() -> None:
    result = knobs_run(metrics=None)
    assert result.of_type(SERVICE) == []
    assert result.of_type(SERVICE_MONITOR) == []
    only_service = knobs_run(metrics={"service": {"enabled": True}})
    assert len(only_service.of_type(SERVICE)) == 1
    assert only_service.of_type(SERVICE_MONITOR) == []
    assert only_service.reads == []


def test_allow_volume_expansion_per_class() -> None:
    classes = {r.inputs["metadata"]["name"]: r.inputs for r in knobs_run().of_type(STORAGE_CLASS)}
    assert classes["local-path-storage"]["allowVolumeExpansion"] is True
    assert classes["fixed-size"]["allowVolumeExpansion"] is False


def test_replicas_keep_their_spread_beside_a_node_affinity() -> None:
    spec = knobs_run(replicas=2).one(DEPLOYMENT).inputs["spec"]["template"]["spec"]
    assert spec["affinity"]["nodeAffinity"] == AFFINITY["nodeAffinity"]
    assert "podAntiAffinity" in spec["affinity"]
    own: dict[str, Any] = {
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []}
    }
    spec = knobs_run(replicas=2, affinity=own).one(DEPLOYMENT).inputs["spec"]["template"]["spec"]
    assert spec["affinity"] == own


BAD_KNOBS: list[tuple[str, dict[str, Any], str]] = [
    ("createNamespace", {"createNamespace": "no"},
     'createNamespace: must be true or false, got "no"'),
    ("configMapName", {"configMapName": "Config_Map"},
     'configMapName: "Config_Map" is not a valid object name (lower-case letters, digits, "-" '
     'and ".", at most 253 characters)'),
    ("provisioningRetryCount", {"provisioningRetryCount": "-1"},
     "provisioningRetryCount: must be at least 0, got -1"),
    ("deletionRetryCount", {"deletionRetryCount": "x"},
     'deletionRetryCount: must be an integer, got "x"'),
    ("priorityClassName", {"priorityClassName": "High"},
     'priorityClassName: "High" is not a valid object name (lower-case letters, digits, "-" '
     'and ".", at most 253 characters)'),
    ("nodeSelector value", {"nodeSelector": {"disk": "s s d"}},
     'nodeSelector["disk"]: "s s d" is not a valid label value (at most 63 letters, digits, '
     '"-", "_" or ".", starting and ending with a letter or digit)'),
    ("nodeSelector shape", {"nodeSelector": ["type=kwok"]},
     "nodeSelector: must be a map of node label keys to values (edit it in the stack file or "
     'with `pulumi config set --path`), got ["type=kwok"]'),
    ("tolerations operator", {"tolerations": [{"key": "a", "operator": "In"}]},
     'tolerations[0].operator: must be one of Equal, Exists; got "In"'),
    ("tolerations effect", {"tolerations": [{"key": "a", "effect": "NoRun"}]},
     'tolerations[0].effect: must be one of NoSchedule, PreferNoSchedule, NoExecute; got "NoRun"'),
    ("tolerations unknown", {"tolerations": [{"key": "a", "efect": "NoSchedule"}]},
     "tolerations[0].efect: unknown key; did you mean effect?"),
    ("tolerationSeconds", {"tolerations": [{"key": "a", "tolerationSeconds": 5}]},
     "tolerations[0].tolerationSeconds: applies only to effect NoExecute"),
    ("affinity unknown", {"affinity": {"nodeAfinity": {}}},
     "affinity.nodeAfinity: unknown key; did you mean nodeAffinity?"),
    ("affinity part", {"affinity": {"podAffinity": []}},
     "affinity.podAffinity: must be an object, got []"),
    ("imagePullSecrets", {"imagePullSecrets": ["Reg Cred"]},
     'imagePullSecrets[0]: "Reg Cred" is not a valid object name (lower-case letters, digits, '
     '"-" and ".", at most 253 characters)'),
    ("podAnnotations key", {"podAnnotations": {"bad key": "x"}},
     'podAnnotations["bad key"]: "bad key" is not a valid key (an optional DNS prefix and /, '
     'then at most 63 letters, digits, "-", "_" or ".")'),
    ("podLabels selector", {"podLabels": {"app.kubernetes.io/instance": "other"}},
     "podLabels[\"app.kubernetes.io/instance\"]: selects the provisioner's pods: "
     "the stack sets it"),
    ("commonLabels own", {"commonLabels": {"app.kubernetes.io/name": "x"}},
     "commonLabels[\"app.kubernetes.io/name\"]: is set by the stack on every object (and selects "
     "the provisioner's pods)"),
    ("commonLabels pod security",
     {"commonLabels": {"pod-security.kubernetes.io/enforce": "baseline"}},
     'commonLabels["pod-security.kubernetes.io/enforce"]: is set by the stack on its namespace: '
     "helper pods mount hostPath volumes, which only the privileged level allows"),
    ("serviceAccount", {"serviceAccount": {"annotation": {}}},
     "serviceAccount.annotation: unknown key; did you mean annotations?"),
    ("serviceAccount value", {"serviceAccount": {"annotations": {"a": 1}}},
     'serviceAccount.annotations["a"]: must be a string, got 1'),
    ("updateStrategy type", {"updateStrategy": {"type": "Canary"}},
     'updateStrategy.type: must be one of RollingUpdate, Recreate; got "Canary"'),
    ("updateStrategy Recreate", {"updateStrategy": {"type": "Recreate", "rollingUpdate": {}}},
     "updateStrategy.rollingUpdate: is only for type RollingUpdate"),
    ("updateStrategy bound", {"updateStrategy": {"rollingUpdate": {"maxSurge": "half"}}},
     "updateStrategy.rollingUpdate.maxSurge: must be a number of pods or a percentage "
     '(e.g. 1 or 25%), got "half"'),
    ("updateStrategy zero", {"updateStrategy": {"rollingUpdate": {"maxSurge": 0,
                                                                  "maxUnavailable": "0%"}}},
     "updateStrategy.rollingUpdate: maxUnavailable and maxSurge cannot both be 0 (the rollout "
     "could never start)"),
    ("metrics enabled", {"metrics": {"service": {"enabled": "yes"}}},
     'metrics.service.enabled: must be true or false, got "yes"'),
    ("metrics monitor alone", {"metrics": {"serviceMonitor": {"enabled": True}}},
     "metrics.serviceMonitor.enabled: needs metrics.service.enabled: true (a ServiceMonitor "
     "scrapes a Service)"),
    ("allowVolumeExpansion", {"storageClasses": one_class(allowVolumeExpansion="sometimes")},
     'storageClasses[0].allowVolumeExpansion: must be true or false, got "sometimes"'),
]  # fmt: skip


@pytest.mark.parametrize(
    ("overrides", "message"),
    [pytest.param(overrides, message, id=name) for name, overrides, message in BAD_KNOBS],
)
def test_a_bad_knob_fails_with_one_line_naming_the_key(
    overrides: dict[str, Any], message: str
) -> None:
    with pytest.raises(SettingsError) as caught:
        parse_settings(dev_with(**overrides))
    assert str(caught.value) == PREFIX + message
    assert "\n" not in str(caught.value)
    assert caught.value.key_path == message.split(": ", 1)[0]


def test_the_knobs_pass_the_policy_pack() -> None:
    """No knob needs an opt-in: what they set (placement, pull secrets, labels, annotations,
    the strategy, a Service) gives the provisioner no right and no privilege it did not have."""
    resources = [
        Resource(r.type, r.inputs, r.name) for r in kubernetes_objects(knobs_run(replicas=2))
    ]
    for resource in resources:
        assert storage_paths.check_resource(resource, storage_paths.DEFAULT_SYSTEM_PATHS) == []
        assert helper_pods.check_unsafe_flag(resource) == []
        assert helper_pods.check_privileged(resource) == []
        assert helper_pods.check_pinned_image(resource) == []
        assert rbac.check_resource(resource) == [], resource.name
        assert provisioner_config.check_resource(resource) == []
    assert default_class.check_stack(resources) == []


@pytest.mark.parametrize(
    ("key", "stored_in"),
    [
        ("nodeSelector", "the provisioner Deployment"),
        ("priorityClassName", "the provisioner Deployment"),
        ("commonLabels", "the labels of every object"),
        ("serviceAccount", "the provisioner ServiceAccount"),
        ("metrics", "the metrics Service"),
        ("configMapName", "the ConfigMap's name and the provisioner Deployment"),
    ],
)
def test_a_secret_knob_is_refused_naming_where_it_would_be_plaintext(
    key: str, stored_in: str
) -> None:
    with pytest.raises(SettingsError) as caught:
        parse_settings(dev_with(**{key: KNOBS[key]}), secret_keys=frozenset({key}))
    assert f"stored in plaintext in {stored_in} and the stack's state" in str(caught.value)
