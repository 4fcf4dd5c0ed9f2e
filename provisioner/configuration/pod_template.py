"""helperPod.yaml validation.

Whoever can edit the ConfigMap decides what runs on every node with the node's disks mounted,
so (like rancher >= v0.0.36, after its advisory) the template may shape the pod — image,
resources, tolerations, hardening — but not widen what it can reach: no extra containers,
volumes, host namespaces, credentials or privileges. The opt-out is for trusted admins only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from provisioner.configuration.config_error import ConfigError

_UNSAFE_HINT = "remove it, or start the provisioner with --allow-unsafe-helper-template"


def _error(key: str, message: str) -> ConfigError:
    return ConfigError(key, message, source="helperPod.yaml")


def parse_helper_template(text: str, *, allow_unsafe: bool = False) -> dict[str, Any]:
    try:
        template = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise _error("", f"is not valid YAML{where}: {getattr(error, 'problem', error)}") from None
    if not isinstance(template, dict):
        raise _error("", "must be a Pod manifest (a YAML mapping with spec.containers)")
    validate_helper_template(template, allow_unsafe=allow_unsafe)
    return template


def validate_helper_template(template: Mapping[str, Any], *, allow_unsafe: bool = False) -> None:
    """Raises ConfigError (prefixed helperPod.yaml) for a template we will not run."""
    if template.get("kind", "Pod") != "Pod" or template.get("apiVersion", "v1") != "v1":
        raise _error("kind", "must be a v1 Pod")
    spec = template.get("spec")
    if not isinstance(spec, dict):
        raise _error("spec", "is required: a Pod spec with one container")
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers or not isinstance(containers[0], dict):
        raise _error("spec.containers", "must list the helper container")
    if not isinstance(containers[0].get("image"), str) or not containers[0]["image"]:
        raise _error("spec.containers[0].image", "is required: an image with /bin/sh")
    if allow_unsafe:
        return
    if len(containers) != 1:
        raise _error("spec.containers", f"must hold exactly one container, not {len(containers)}")
    container = containers[0]
    for key in ("initContainers", "ephemeralContainers", "volumes"):
        _forbid(spec.get(key), f"spec.{key}", "must not be set: the provisioner adds what it needs")
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        _forbid(spec.get(key), f"spec.{key}", "must not be true: it opens the host's namespaces")
    for key in ("nodeName", "serviceAccountName", "serviceAccount"):
        _forbid(spec.get(key), f"spec.{key}", "must not be set: the provisioner chooses it")
    where = "spec.containers[0]"
    for key in ("volumeMounts", "volumeDevices", "envFrom"):
        _forbid(container.get(key), f"{where}.{key}", "must not be set")
    for i, env in enumerate(container.get("env") or ()):
        if isinstance(env, dict):
            _forbid(env.get("valueFrom"), f"{where}.env[{i}].valueFrom", "must not read secrets")
    for key in ("lifecycle", "livenessProbe", "readinessProbe", "startupProbe"):
        _forbid(container.get(key), f"{where}.{key}", "must not be set: the helper is one command")
    _check_security_context(spec.get("securityContext"), "spec.securityContext", pod=True)
    _check_security_context(container.get("securityContext"), f"{where}.securityContext", pod=False)
    # Beyond the named refusals above, only what is known to be harmless passes: a field a new
    # Kubernetes version adds, or one that loosens isolation (runtimeClassName, hostUsers,
    # seLinuxOptions, procMount, an Unconfined profile), must be looked at before it is allowed.
    _allow_only(template, _TEMPLATE_KEYS, "")
    _allow_only(template.get("metadata"), _METADATA_KEYS, "metadata")
    for key in (template.get("metadata") or {}).get("annotations") or {}:
        if str(key).startswith(_PROFILE_ANNOTATIONS):
            raise _error(f"metadata.annotations[{key}]", f"must not be set; {_UNSAFE_HINT}")
    _allow_only(spec, _POD_SPEC_KEYS, "spec")
    _allow_only(container, _CONTAINER_KEYS, where)
    for context, allowed, at in (
        (spec.get("securityContext"), _POD_SECURITY_KEYS, "spec.securityContext"),
        (container.get("securityContext"), _CONTAINER_SECURITY_KEYS, f"{where}.securityContext"),
    ):
        _allow_only(context, allowed, at)
        if isinstance(context, dict):
            for profile in ("seccompProfile", "appArmorProfile"):
                kind = (context.get(profile) or {}).get("type")
                if kind not in (None, "RuntimeDefault", "Localhost"):
                    raise _error(
                        f"{at}.{profile}.type",
                        f"must be RuntimeDefault or Localhost, not {kind}; {_UNSAFE_HINT}",
                    )


_TEMPLATE_KEYS = frozenset({"apiVersion", "kind", "metadata", "spec"})
_METADATA_KEYS = frozenset({"name", "namespace", "labels", "annotations", "generateName"})
_PROFILE_ANNOTATIONS = (
    "container.apparmor.security.beta.kubernetes.io/",
    "seccomp.security.alpha.kubernetes.io/",
    "container.seccomp.security.alpha.kubernetes.io/",
)
_POD_SPEC_KEYS = frozenset(
    {
        "containers",
        "tolerations",
        "priorityClassName",
        "priority",
        "preemptionPolicy",
        "nodeSelector",
        "affinity",
        "topologySpreadConstraints",
        "schedulerName",
        "imagePullSecrets",
        "securityContext",
        "terminationGracePeriodSeconds",
        "activeDeadlineSeconds",
        "restartPolicy",
        "automountServiceAccountToken",
        "enableServiceLinks",
        "dnsPolicy",
        "dnsConfig",
    }
)
_CONTAINER_KEYS = frozenset(
    {
        "name",
        "image",
        "imagePullPolicy",
        "command",
        "args",
        "workingDir",
        "env",
        "resources",
        "securityContext",
        "terminationMessagePath",
        "terminationMessagePolicy",
    }
)
_POD_SECURITY_KEYS = frozenset(
    {
        "runAsUser",
        "runAsGroup",
        "runAsNonRoot",
        "fsGroup",
        "fsGroupChangePolicy",
        "supplementalGroups",
        "supplementalGroupsPolicy",
        "seccompProfile",
        "appArmorProfile",
    }
)
_CONTAINER_SECURITY_KEYS = frozenset(
    {
        "runAsUser",
        "runAsGroup",
        "runAsNonRoot",
        "readOnlyRootFilesystem",
        "allowPrivilegeEscalation",
        "privileged",
        "capabilities",
        "seccompProfile",
        "appArmorProfile",
    }
)


def _allow_only(section: Any, allowed: frozenset[str], where: str) -> None:
    if not isinstance(section, dict):
        return
    for key in sorted(set(section) - allowed):
        raise _error(
            f"{where}.{key}" if where else key,
            f"is not allowed in a helper template (allowed here: {', '.join(sorted(allowed))});"
            f" {_UNSAFE_HINT}",
        )


def _forbid(value: Any, key: str, why: str) -> None:
    if value not in (None, False, "", [], {}):
        raise _error(key, f"{why}; {_UNSAFE_HINT}")


def _check_security_context(context: Any, where: str, *, pod: bool) -> None:
    if not isinstance(context, dict):
        return
    for key in ("runAsUser", "runAsGroup"):
        value = context.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value == 0:
            raise _error(f"{where}.{key}", f"must not be 0 (root) explicitly; {_UNSAFE_HINT}")
    if pod:
        _forbid(context.get("sysctls"), f"{where}.sysctls", "must not be set")
        return
    _forbid(context.get("privileged"), f"{where}.privileged", "must not be true: root on the node")
    capabilities = context.get("capabilities")
    if isinstance(capabilities, dict):
        _forbid(capabilities.get("add"), f"{where}.capabilities.add", "must not add capabilities")
        _allow_only(capabilities, frozenset({"add", "drop"}), f"{where}.capabilities")
    _forbid(
        context.get("allowPrivilegeEscalation"),
        f"{where}.allowPrivilegeEscalation",
        "must not be true",
    )
