"""The kwok Stage objects that make fake nodes Ready and ordinary pods Running.

Why: standalone kwok does nothing without stages, and without a heartbeat the controller-manager
marks its nodes NotReady and evicts their pods. These follow the behaviour of kwok's "fast"
node/pod stage sets (node-initialize, node-heartbeat-with-lease, pod-ready, pod-delete),
written out here as data so the pinned harness does not depend on files outside the
repository; upstream's pod-complete (a Job's pods succeed) is left out: no test runs a Job.
Every pod stage skips helper pods (label `local-path-storage.io/helper-pod: "true"`) and pods
whose first container's image repository is in the image table: the harness's runners
execute those for real and own their status, so kwok must never write it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from localcluster.helper_pods import HELPER_POD_LABEL, HELPER_POD_LABEL_VALUE

_NOT_HELPER_POD = {
    "key": f'.metadata.labels["{HELPER_POD_LABEL}"]',
    "operator": "NotIn",
    "values": [HELPER_POD_LABEL_VALUE],
}
# kwok evaluates selector keys with gojq: this yields the repository of the first container's
# image, as image_table.image_repository computes it (digest, then tag, stripped).
IMAGE_REPOSITORY_QUERY = '.spec.containers[0].image | sub("@.*$"; "") | sub(":[^:/]*$"; "")'
_NOT_DELETING = {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"}
_READY_STATUS = '.status.conditions.[] | select( .type == "Ready" ) | .status'

_NODE_CONDITIONS = """\
{{ $now := Now }}
{{ $since := or .metadata.creationTimestamp $now }}
conditions:
{{ range NodeConditions }}
- type: {{ .type | Quote }}
  status: {{ .status | Quote }}
  reason: {{ .reason | Quote }}
  message: {{ .message | Quote }}
  lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $since | Quote }}
{{ end }}
addresses:
{{ with NodeIP }}
- type: InternalIP
  address: {{ . | Quote }}
{{ end }}
{{ with NodeName }}
- type: Hostname
  address: {{ . | Quote }}
{{ end }}
"""

_NODE_INITIALIZE = (
    _NODE_CONDITIONS
    + """\
allocatable:
{{ with .status.allocatable }}{{ YAML . 1 }}{{ else }}
  cpu: 1k
  memory: 1Ti
  pods: 1M
{{ end }}
capacity:
{{ with .status.capacity }}{{ YAML . 1 }}{{ else }}
  cpu: 1k
  memory: 1Ti
  pods: 1M
{{ end }}
nodeInfo:
  architecture: amd64
  operatingSystem: linux
  kubeletVersion: {{ printf "kwok-%s" Version | Quote }}
  kubeProxyVersion: {{ printf "kwok-%s" Version | Quote }}
  containerRuntimeVersion: {{ printf "kwok-%s" Version | Quote }}
  kernelVersion: {{ printf "kwok-%s" Version | Quote }}
  bootID: ""
  machineID: ""
  osImage: ""
  systemUUID: ""
phase: Running
"""
)

_POD_READY = """\
{{ $now := Now }}
conditions:
- type: Initialized
  status: "True"
  lastTransitionTime: {{ $now | Quote }}
- type: Ready
  status: "True"
  lastTransitionTime: {{ $now | Quote }}
- type: ContainersReady
  status: "True"
  lastTransitionTime: {{ $now | Quote }}
{{ range .spec.readinessGates }}
- type: {{ .conditionType | Quote }}
  status: "True"
  lastTransitionTime: {{ $now | Quote }}
{{ end }}
containerStatuses:
{{ range .spec.containers }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  ready: true
  started: true
  restartCount: 0
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ end }}
initContainerStatuses:
{{ range .spec.initContainers }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  ready: true
  restartCount: 0
  state:
    terminated:
      exitCode: 0
      reason: Completed
      startedAt: {{ $now | Quote }}
      finishedAt: {{ $now | Quote }}
{{ end }}
{{ with NodeIPsWith .spec.nodeName }}
hostIP: {{ index . 0 | Quote }}
hostIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
{{ $hostNetwork := or .spec.hostNetwork false }}
{{ $uid := or .metadata.uid "" }}
{{ $name := or .metadata.name "" }}
{{ $namespace := or .metadata.namespace "" }}
{{ with PodIPsWith .spec.nodeName $hostNetwork $uid $name $namespace }}
podIP: {{ index . 0 | Quote }}
podIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
phase: Running
startTime: {{ $now | Quote }}
"""


def _stage(
    name: str, kind: str, expressions: list[dict[str, Any]], next_step: dict[str, Any]
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "resourceRef": {"apiGroup": "v1", "kind": kind},
        "selector": {"matchExpressions": expressions},
        "next": next_step,
    }
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": name},
        "spec": spec,
    }


def stages(image_repositories: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The Stage documents, in the order kwok should consider them; pod stages skip pods whose
    image repository is one of `image_repositories`."""
    skipped = [_NOT_HELPER_POD]
    if image_repositories:
        skipped.append(
            {
                "key": IMAGE_REPOSITORY_QUERY,
                "operator": "NotIn",
                "values": sorted(image_repositories),
            }
        )
    node_initialize = _stage(
        "node-initialize",
        "Node",
        [{"key": _READY_STATUS, "operator": "NotIn", "values": ["True"]}],
        {"statusTemplate": _NODE_INITIALIZE},
    )
    # kwok renews each node's Lease itself; this stage only refreshes the conditions now and
    # then (every 10 to 20 minutes, as upstream does) so status never looks stale.
    node_heartbeat = _stage(
        "node-heartbeat-with-lease",
        "Node",
        [
            {"key": ".status.phase", "operator": "In", "values": ["Running"]},
            {"key": _READY_STATUS, "operator": "In", "values": ["True"]},
        ],
        {"statusTemplate": _NODE_CONDITIONS},
    )
    node_heartbeat["spec"]["delay"] = {
        "durationMilliseconds": 600_000,
        "jitterDurationMilliseconds": 1_200_000,
    }
    pod_ready = _stage(
        "pod-ready",
        "Pod",
        [
            *skipped,
            _NOT_DELETING,
            {"key": ".status.phase", "operator": "In", "values": ["Pending"]},
            {"key": _READY_STATUS, "operator": "NotIn", "values": ["True"]},
        ],
        {"statusTemplate": _POD_READY},
    )
    pod_delete = _stage(
        "pod-delete",
        "Pod",
        [*skipped, {"key": ".metadata.deletionTimestamp", "operator": "Exists"}],
        {"delete": True},
    )
    return [node_initialize, node_heartbeat, pod_ready, pod_delete]


def write_stages(path: Path, image_repositories: Sequence[str] = ()) -> Path:
    """Writes the stages as one multi-document YAML file for `kwok --config`."""
    documents = stages(image_repositories)
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False), encoding="utf-8")
    return path
