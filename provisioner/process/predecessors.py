"""Which pods of its namespace a provisioner that takes over another one (`--predecessor-selector`)
waits for before it works, and stops for while it leads: the predecessor's.

rancher/local-path-provisioner v0.0.37 leaves two kinds of pods. Its provisioner's own carry its
Deployment's label (the selector, `app=local-path-provisioner`). Its helper pods carry no label
of their own (only what its helperPod.yaml gives, nothing by default), no owner and no deadline;
they are named after that template (`helper-pod-create-<pv>` by default, but any name the
template gives) and always mount the volume's parent directory as a hostPath. rancher polls such
a pod and deletes it when it is done, but a rancher stopped meanwhile just returns: the pod is
left to start whenever the node runs it, and a teardown then removes whatever is at its path by
then, a recreated claim's directory included. So a pod is the predecessor's when it is not ours
and either the selector matches it or it is a bare pod (no controller owns it, so nobody but its
maker would ever delete it) that mounts a hostPath. Pods that a Deployment, DaemonSet, Job or
node runs are left alone: rancher's namespace may be kube-system (k3s installs it there), whose
workloads never go away.

A pod that has finished (Succeeded or Failed) never runs again and is not waited for; a
terminating one is: it runs until its containers end.

Ours: our helper pods (`HELPER_POD_LABEL`), this process's own pod, and any other replica of ours,
which in a takeover in place runs in the predecessor's namespace: a pod carrying every label of
our own pod but the ReplicaSet's `pod-template-hash` (another version of our Deployment is ours
too).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import msgspec

from provisioner.helper_pods.pod_shapes import HELPER_POD_LABEL, HELPER_POD_LABEL_VALUE

FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
TEMPLATE_HASH_LABEL = "pod-template-hash"
"""The label a ReplicaSet adds to its pods: it differs between two versions of one Deployment."""


class OwnerReference(msgspec.Struct, gc=False):
    kind: str = ""
    name: str = ""
    controller: bool | None = None


class PodMeta(msgspec.Struct, rename="camel", gc=False):
    name: str = ""
    uid: str = ""
    labels: dict[str, str] | None = None
    owner_references: list[OwnerReference] | None = None
    deletion_timestamp: str | None = None


class HostPathSource(msgspec.Struct, gc=False):
    path: str = ""


class PodVolume(msgspec.Struct, rename="camel", gc=False):
    host_path: HostPathSource | None = None


class PodSpec(msgspec.Struct, gc=False):
    volumes: list[PodVolume] | None = None


class PodStatus(msgspec.Struct, gc=False):
    phase: str = ""


class Pod(msgspec.Struct, gc=False):
    """The members of a pod that tell whether it is the predecessor's (an informer decodes each
    pod straight into this)."""

    metadata: PodMeta = msgspec.field(default_factory=PodMeta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)
    status: PodStatus = msgspec.field(default_factory=PodStatus)


def pod_name(pod: Pod) -> str:
    """An informer's key for the pods of one namespace."""
    return pod.metadata.name


@dataclass(frozen=True)
class OurPods:
    """What tells our pods apart from the predecessor's in a namespace we may share with it."""

    own_pod: str = ""
    """This process's pod; "" when it runs in none (a test's process)."""
    replica_labels: Mapping[str, str] = field(default_factory=dict)
    """Our own pod's labels but `pod-template-hash`; empty when our pod is not known."""

    def include(self, pod: Pod) -> bool:
        labels = pod.metadata.labels or {}
        if labels.get(HELPER_POD_LABEL) == HELPER_POD_LABEL_VALUE:
            return True
        if self.own_pod and pod.metadata.name == self.own_pod:
            return True
        return bool(self.replica_labels) and all(
            labels.get(key) == value for key, value in self.replica_labels.items()
        )


def our_pods(own_pod: str, own_pod_labels: Mapping[str, str] | None) -> OurPods:
    """`own_pod_labels`: our own pod's labels, None when there is no such pod."""
    replica_labels = {
        key: value for key, value in (own_pod_labels or {}).items() if key != TEMPLATE_HASH_LABEL
    }
    return OurPods(own_pod, replica_labels)


def parse_selector(selector: str) -> dict[str, str]:
    """`key=value[,key=value]` (checked by options.py) as a dict."""
    pairs = (pair.partition("=") for pair in selector.split(",") if pair)
    return {key: value for key, _, value in pairs}


@dataclass(frozen=True)
class PredecessorPod:
    name: str
    uid: str
    why: str
    """What makes it the predecessor's, for the log and the Warning."""
    terminating: bool


def predecessor_pod(pod: Pod, selector: Mapping[str, str], ours: OurPods) -> PredecessorPod | None:
    """The pod as one the takeover must wait for, or None when it is ours, finished, or neither
    matched by `selector` nor a bare pod with a hostPath."""
    if ours.include(pod) or pod.status.phase in FINISHED_PHASES:
        return None
    labels = pod.metadata.labels or {}
    if selector and all(labels.get(key) == value for key, value in selector.items()):
        why = "matches " + ",".join(f"{key}={value}" for key, value in selector.items())
    else:
        host_paths = [
            volume.host_path.path
            for volume in pod.spec.volumes or ()
            if volume.host_path is not None
        ]
        controlled = any(owner.controller for owner in pod.metadata.owner_references or ())
        if not host_paths or controlled:
            return None
        why = f"no controller owns it and it mounts hostPath {', '.join(host_paths)}"
    return PredecessorPod(
        name=pod.metadata.name,
        uid=pod.metadata.uid,
        why=why,
        terminating=pod.metadata.deletion_timestamp is not None,
    )


def describe_pods(pods: Iterable[PredecessorPod]) -> str:
    """`a (terminating), b`, by name."""
    return ", ".join(
        f"{pod.name} (terminating)" if pod.terminating else pod.name
        for pod in sorted(pods, key=lambda pod: pod.name)
    )
