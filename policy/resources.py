"""Reading the stack's Kubernetes objects as the policies see them: plain dicts of the
provider's inputs (camelCase), whatever program or transformation built them.

Which objects a resource writes is decided here once, from its type token, for every policy:
`kubernetes:<group>/<version>:<Kind>` writes one <Kind>, `<Kind>Patch` writes part of one
(a server-side apply patch, which creates the object when it is missing), `<Kind>List` writes
each of its `items`. KINDS_BY_GROUP is the table of the kinds the pack checks, for every
version of their group; each policy maps a kind to its check (`check_objects`), so one check
serves a kind, its Patch and its List. A resource of any other type is not silently passed
when it carries a pod spec: see UNREADABLE.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import yaml

from provisioner.configuration.config import ConfigError, ProvisionerConfig, parse_config_json

CONFIG_MAP = "ConfigMap"
STORAGE_CLASS = "StorageClass"
DEPLOYMENT = "Deployment"
CLUSTER_ROLE = "ClusterRole"
ROLE = "Role"
CLUSTER_ROLE_BINDING = "ClusterRoleBinding"
ROLE_BINDING = "RoleBinding"

DEFAULT_CLASS_ANNOTATIONS = (
    "storageclass.kubernetes.io/is-default-class",
    "storageclass.beta.kubernetes.io/is-default-class",
)


@dataclass(frozen=True)
class Resource:
    """One resource of the stack: its type token, its inputs and its URN (to report on)."""

    type: str
    props: Mapping[str, Any]
    urn: str = ""

    @property
    def name(self) -> str:
        """metadata.name, or the URN's last part when the object has no name yet."""
        return _metadata_name(self.props) or self.urn.rsplit("::", 1)[-1]


def _metadata_name(props: Mapping[str, Any]) -> str | None:
    metadata = props.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    return name if isinstance(name, str) else None


KINDS_BY_GROUP: Mapping[str, frozenset[str]] = {
    "core": frozenset({CONFIG_MAP, "Pod"}),
    "apps": frozenset({DEPLOYMENT, "StatefulSet", "DaemonSet", "ReplicaSet"}),
    "extensions": frozenset({DEPLOYMENT, "DaemonSet", "ReplicaSet"}),
    "batch": frozenset({"Job", "CronJob"}),
    "storage.k8s.io": frozenset({STORAGE_CLASS}),
    "rbac.authorization.k8s.io": frozenset(
        {CLUSTER_ROLE, ROLE, CLUSTER_ROLE_BINDING, ROLE_BINDING}
    ),
}
"""API group -> the kinds the pack checks in it (each with its Patch and List forms)."""
UNREADABLE = "a pod spec in a kind the pack does not read"
"""The kind given to each pod spec (a mapping with a list of `containers` or `initContainers`)
found anywhere in an object of the Kubernetes provider whose kind is not in KINDS_BY_GROUP: an
Argo Rollout, a Deployment or CronJob of an API group the table lacks, a custom resource, a
PodTemplate. "Cannot read" means exactly this: the pack does not know whether that kind's
controller runs the spec, how, or what it adds to it (env, args, containers), so what the spec
says is no verdict. Rather than pass it, the workload policy reports one that would run the
provisioner (see helper_pods). (A value not known during preview is the engine's case: it
makes the policy advisory for that preview, and `up` checks the known value.)"""
POD_SPEC_PATHS: Mapping[str, tuple[str, ...]] = {
    DEPLOYMENT: ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
    "Pod": ("spec",),
    UNREADABLE: (),
}
"""Where each kind that runs containers keeps its pod spec."""
WORKLOADS = frozenset(POD_SPEC_PATHS) - {UNREADABLE}
_COMPONENTS = frozenset(
    {
        "kubernetes:yaml:ConfigFile",
        "kubernetes:yaml:ConfigGroup",
        "kubernetes:yaml/v2:ConfigFile",
        "kubernetes:yaml/v2:ConfigGroup",
        "kubernetes:helm.sh/v2:Chart",
        "kubernetes:helm.sh/v3:Chart",
        "kubernetes:helm.sh/v4:Chart",
        "kubernetes:kustomize:Directory",
        "kubernetes:kustomize/v2:Directory",
    }
)
"""The Kubernetes provider's components: each object they make is a resource of its own, which
the pack checks as such (their inputs, `objs` say, hold the same objects again). Resources of
other packages (this project's components, providers) write no Kubernetes object either."""
_TOKEN = re.compile(r"kubernetes:(?P<group>[^/:]+)/[^/:]+:(?P<kind>\w+?)(?P<form>Patch|List)?")


@dataclass(frozen=True)
class KubeObject:
    """One object a resource writes (the resource itself, or one item of a List)."""

    kind: str
    """Its Kubernetes kind, which says which check applies, or UNREADABLE."""
    props: Mapping[str, Any]
    """The object (for UNREADABLE: the pod spec found)."""
    name: str
    """metadata.name (the resource's name when it has none yet, `items[N]` for an item)."""
    label: str
    """How a message names it: `ConfigMapPatch local-path-config`, `ConfigMapList cms items[0]
    (ConfigMap local-path-config)`."""
    urn: str = ""
    partial: bool = False
    """Written by a Patch: a field it leaves out keeps its value in the cluster, which the pack
    cannot see, so an absent field is not a default; only what is present is checked."""


Check = Callable[[KubeObject], list[str]]


def kube_objects(resource: Resource) -> list[KubeObject]:
    """The objects `resource` writes that some policy checks (see the module's docstring)."""
    token_kind = resource.type.rsplit(":", 1)[-1]
    match = _TOKEN.fullmatch(resource.type)
    if not resource.type.startswith("kubernetes:") or resource.type in _COMPONENTS:
        return []
    if match is None or match["kind"] not in KINDS_BY_GROUP.get(match["group"], ()):
        return [
            KubeObject(
                UNREADABLE,
                spec,
                resource.name,
                f"{token_kind} {resource.name} {where}",
                resource.urn,
            )
            for where, spec in _pod_specs(resource.props, "")
        ]
    kind = match["kind"]
    if match["form"] != "List":
        label = f"{token_kind} {resource.name}"
        partial = match["form"] == "Patch"
        return [KubeObject(kind, resource.props, resource.name, label, resource.urn, partial)]
    items: Any = resource.props.get("items")
    objects = []
    for index, item in enumerate(items if _is_list(items) else ()):
        if isinstance(item, Mapping):
            name = _metadata_name(item) or f"items[{index}]"
            label = f"{token_kind} {resource.name} items[{index}] ({kind} {name})"
            objects.append(KubeObject(kind, item, name, label, resource.urn))
    return objects


def check_objects(resource: Resource, checks: Mapping[str, Check]) -> list[str]:
    """The messages of each object `resource` writes, by the check of its kind (none for a
    kind not in `checks`)."""
    return [
        message
        for found in kube_objects(resource)
        if (check := checks.get(found.kind)) is not None
        for message in check(found)
    ]


def pod_spec(found: KubeObject) -> Mapping[str, Any] | None:
    """The pod spec of a workload, or None (not a workload, or a Patch that leaves it out)."""
    path = POD_SPEC_PATHS.get(found.kind)
    node: Any = found.props
    for key in path or ():
        node = node.get(key) if isinstance(node, Mapping) else None
    return node if path is not None and isinstance(node, Mapping) else None


def _is_list(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str | bytes)


def _pod_specs(node: Any, where: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(key path, mapping) of every pod spec in `node`: a mapping with a list of containers.
    metadata is skipped: it holds no pod spec (an annotation's is text, not run), and during
    preview it is where a value not known yet (a namespace's name) most often is, which would
    stop the policy for every object of the stack."""
    if isinstance(node, Mapping):
        if any(_is_list(node.get(key)) for key in ("containers", "initContainers")):
            yield where or "(the object)", node
        for key in node:
            if key != "metadata":
                yield from _pod_specs(node[key], f"{where}.{key}" if where else str(key))
    elif _is_list(node):
        for index, value in enumerate(node):
            yield from _pod_specs(value, f"{where}[{index}]")


def config_map_files(found: KubeObject) -> dict[str, str] | None:
    """The files of a provisioner ConfigMap (one holding config.json; a Patch, also one that
    sets only helperPod.yaml), else None. binaryData keys are files of the mounted volume too:
    they are read decoded (a value that is not base64 is left out: the API server refuses it)."""
    if found.kind != CONFIG_MAP:
        return None
    files: dict[str, str] = {}
    binary = found.props.get("binaryData")
    for key, value in (binary if isinstance(binary, Mapping) else {}).items():
        try:
            files[str(key)] = base64.b64decode(str(value), validate=True).decode(errors="replace")
        except binascii.Error:
            continue
    data = found.props.get("data")
    for key, value in (data if isinstance(data, Mapping) else {}).items():
        if isinstance(value, str):
            files[str(key)] = value
    identifying = ("config.json", "helperPod.yaml") if found.partial else ("config.json",)
    return files if any(key in files for key in identifying) else None


@lru_cache(maxsize=64)
def parsed_config_json(text: str) -> ProvisionerConfig | ConfigError:
    """config.json as the runtime parses it, or the runtime's error: parsed once per text for
    every policy of the pack (each is called on its own with the same ConfigMap). Both results
    are immutable, so sharing them is safe."""
    try:
        return parse_config_json(text)
    except ConfigError as error:
        return error


def helper_template(files: Mapping[str, str]) -> dict[str, Any] | None:
    """helperPod.yaml as a mapping, or None when absent or not a YAML mapping (the config
    policy reports that with the runtime's message)."""
    try:
        template = yaml.safe_load(files.get("helperPod.yaml", ""))
    except yaml.YAMLError:
        return None
    return template if isinstance(template, dict) else None


def is_default_class(found: KubeObject) -> bool:
    metadata = found.props.get("metadata")
    annotations = (metadata.get("annotations") if isinstance(metadata, Mapping) else None) or {}
    return any(str(annotations.get(key, "")).lower() == "true" for key in DEFAULT_CLASS_ANNOTATIONS)
