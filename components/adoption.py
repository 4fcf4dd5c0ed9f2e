"""Stack config `adopt`: take over a running rancher/local-path-provisioner in place.

    adopt:
      from: rancher                          # the only installation kind this knows
      namespace: local-path-storage          # each default: rancher v0.0.37's manifest
      provisionerName: rancher.io/local-path
      configMapName: local-path-config
      deploymentName: local-path-provisioner
      clusterRoleBindingName: local-path-provisioner-bind
      roleBindingName: local-path-provisioner-bind
      storageClasses: [local-path]

Why the stack's own names are rancher's then: the runtime serves the volumes whose PVs carry
its provisioner name (pv.kubernetes.io/provisioned-by), and a class's provisioner cannot change,
so the provisioner runs under rancher's name, in rancher's namespace (where rancher's Lease would
be), on rancher's ConfigMap. The stack keys naming them (namespace, provisionerName,
configMapName) follow `adopt`; one set to another value is refused. createNamespace is false then:
the namespace is rancher's and stays when the stack goes. Every adopted class must be one of
storageClasses, declared as rancher made it: StorageClass fields are immutable, and the import
must not turn into a replacement of a class that bound volumes name.

rancher's RBAC is taken away, not adopted: its ClusterRole grants pods and every PV across the
cluster, which the policy pack's least-privilege-rbac refuses in a stack, and a service account
of a Deployment at 0 replicas needs no rights. Its two bindings are left naming only a group no
one is in (a server-side apply patch of their subjects); the roles, the bindings and the account
stay, so the way back is one patch per binding (docs/rancher.md, "The way back").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from components.args import AdoptionArgs
from components.stack_values import (
    InvalidValueError,
    SettingsError,
    check_dns_label,
    check_object_name,
    check_provisioner_name,
    check_storage_class_name,
    decode_structured,
    show,
    unknown_key,
)

ADOPT_KEY = "adopt"
ADOPT_KEYS = (
    "from",
    "namespace",
    "provisionerName",
    "configMapName",
    "deploymentName",
    "clusterRoleBindingName",
    "roleBindingName",
    "storageClasses",
)
"""The keys of `adopt`, in the order they are checked (and an unknown key's message lists)."""
SOURCES = ("rancher",)
_CHECKS = {
    "namespace": check_dns_label("namespace name", 63),
    "provisionerName": check_provisioner_name,
    "configMapName": check_object_name,
    "deploymentName": check_object_name,
    "clusterRoleBindingName": check_object_name,
    "roleBindingName": check_object_name,
}
_FOLLOWS_ADOPT = {
    "namespace": "namespace",
    "provisionerName": "provisionerName",
    "configMapName": "configMapName",
}
"""Stack keys whose value `adopt` gives, by the `adopt` key that gives it."""


def parse_adoption(text: str) -> AdoptionArgs:
    """The `adopt` value (JSON text, as the engine passes it); SettingsError names the key."""
    try:
        value = decode_structured(text, dict, "an object such as {from: rancher}")
    except InvalidValueError as error:
        raise SettingsError(ADOPT_KEY, error.message) from None
    for name in value:
        if name not in ADOPT_KEYS:
            raise SettingsError(f"{ADOPT_KEY}.{name}", unknown_key(name, ADOPT_KEYS))
    source = value.get("from")
    if source not in SOURCES:
        message = "is required" if source is None else f"{show(source)} is not known"
        raise SettingsError(
            f"{ADOPT_KEY}.from",
            f"{message}: the installation taken over, one of {', '.join(SOURCES)}",
        )
    given: dict[str, Any] = {}
    for key, check in _CHECKS.items():
        if key in value:
            given[_field(key)] = _checked(key, value[key], check)
    if "storageClasses" in value:
        given["storage_classes"] = _class_names(value["storageClasses"])
    return AdoptionArgs(**given)


def _field(key: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in key)


def _checked(key: str, value: object, check: Any) -> str:
    where = f"{ADOPT_KEY}.{key}"
    if not isinstance(value, str):
        raise SettingsError(where, f"must be a string, got {show(value)}")
    problem = check(value)
    if problem is not None:
        raise SettingsError(where, problem)
    return value


def _class_names(value: object) -> tuple[str, ...]:
    where = f"{ADOPT_KEY}.storageClasses"
    if not isinstance(value, list) or not value:
        raise SettingsError(where, f"must be a non-empty list of class names, got {show(value)}")
    names: list[str] = []
    for index, name in enumerate(value):
        if not isinstance(name, str):
            raise SettingsError(f"{where}[{index}]", f"must be a string, got {show(name)}")
        problem = check_storage_class_name(name)
        if problem is None and name in names:
            problem = f"{show(name)} is listed twice"
        if problem is not None:
            raise SettingsError(f"{where}[{index}]", problem)
        names.append(name)
    return tuple(names)


def adopted_value(adoption: AdoptionArgs, key: str) -> str:
    """The value `adopt` gives the stack key `key` (one of namespace, provisionerName,
    configMapName)."""
    return str(getattr(adoption, _field(_FOLLOWS_ADOPT[key])))


def check_stack_keys(
    adoption: AdoptionArgs, values: Mapping[str, str], defaults: Mapping[str, object]
) -> None:
    """The stack keys that `adopt` gives: unset, or set to the same value. The engine fills in
    Pulumi.yaml's defaults for keys a stack does not set, so a default value counts as unset."""
    for key, adopt_key in _FOLLOWS_ADOPT.items():
        wanted = adopted_value(adoption, key)
        if values.get(key, wanted) not in (wanted, defaults[key]):
            raise SettingsError(
                key,
                f"is {show(values[key])}, but adopt.{adopt_key} is {show(wanted)}: an adopted "
                f"installation keeps rancher's {key}; remove {key} from the stack (adopt sets "
                "it) or make the two equal",
            )


def check_adopted_classes(adoption: AdoptionArgs, class_names: Sequence[str]) -> None:
    """Each adopted class is one of the stack's storageClasses (declared as rancher made it)."""
    for index, name in enumerate(adoption.storage_classes):
        if name not in class_names:
            raise SettingsError(
                f"{ADOPT_KEY}.storageClasses[{index}]",
                f"{show(name)} is not one of storageClasses: declare it there as rancher made "
                f"it (e.g. {{name: {name}, reclaimPolicy: Delete, volumeBindingMode: "
                "WaitForFirstConsumer}) so that it is imported, not replaced",
            )


def adoption_summary(adoption: AdoptionArgs) -> str:
    """The preview's line on what the takeover does (the import and the patch show beside it)."""
    classes = ", ".join(adoption.storage_classes)
    return (
        f"adopting rancher's installation in namespace {adoption.namespace}: StorageClasses "
        f"{classes} and ConfigMap {adoption.config_map_name} are imported (kept in the cluster "
        f"when the stack goes), Deployment {adoption.deployment_name} is scaled to 0 before the "
        f"provisioner starts as {adoption.provisioner_name}; its volumes are served from then on; "
        f"ClusterRoleBinding {adoption.cluster_role_binding_name} and RoleBinding "
        f"{adoption.role_binding_name} are bound to no one (rancher's account keeps no rights)"
    )
