"""A container's environment and downward-API values, as a kubelet computes them.

Why: the provisioner reads its namespace from `POD_NAMESPACE` (a `fieldRef`), and the
kubernetes client's in-cluster config from `KUBERNETES_SERVICE_HOST`/`_PORT`; helper pods
expand `$(VAR)` in their arguments. One interpreter of these rules serves both runners and
the downward-API volume. Pure: values that live in the API (ConfigMap and Secret keys) come
through a callback.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_VARIABLE_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
_SUBSCRIPT = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")

DataLookup = Callable[[str, str], "Mapping[str, str] | None"]
"""(kind "configMap" | "secret", name) -> the object's data as text, None when it is absent."""


class MissingReferenceError(Exception):
    """A non-optional ConfigMap or Secret key the environment names does not exist (yet)."""


def expand_variables(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes `$(VAR)` expansion: defined names are replaced, `$$` escapes a `$`, and
    references to undefined names stay as written."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env.get(name, match.group(0))

    return _VARIABLE_REFERENCE.sub(replace, text)


def pod_field(pod: Mapping[str, Any], field_path: str) -> str:
    """The downward-API value of `field_path` (as `fieldRef` and downwardAPI volumes see it);
    empty for a field not (yet) set."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    subscript = _SUBSCRIPT.match(field_path)
    if subscript:
        return str((metadata.get(subscript.group(1)) or {}).get(subscript.group(2), ""))
    if field_path in ("metadata.labels", "metadata.annotations"):
        values = metadata.get(field_path.split(".")[1]) or {}
        return "\n".join(f'{key}="{value}"' for key, value in sorted(values.items()))
    if field_path in ("status.podIPs", "status.hostIPs"):
        entries = status.get(field_path.split(".")[1]) or []
        return ",".join(str(entry.get("ip", "")) for entry in entries)
    section, _, name = field_path.partition(".")
    source = {"metadata": metadata, "spec": spec, "status": status}.get(section) or {}
    return str(source.get(name) or "")


def _value_from(
    pod: Mapping[str, Any], source: Mapping[str, Any], lookup: DataLookup | None
) -> str | None:
    if "fieldRef" in source:
        return pod_field(pod, source["fieldRef"]["fieldPath"])
    for kind, key in (("configMap", "configMapKeyRef"), ("secret", "secretKeyRef")):
        if key in source and lookup is not None:
            reference = source[key]
            value = (lookup(kind, reference["name"]) or {}).get(reference["key"])
            if value is None and not reference.get("optional"):
                raise MissingReferenceError(
                    f"{kind} {reference['name']!r} has no key {reference['key']!r}"
                )
            return value
    return None  # resourceFieldRef is not emulated


def container_environment(
    container: Mapping[str, Any],
    pod_name: str,
    *,
    pod: Mapping[str, Any] | None = None,
    defaults: Mapping[str, str] | None = None,
    lookup: DataLookup | None = None,
) -> dict[str, str]:
    """The process environment: PATH, HOSTNAME and HOME defaults (then `defaults`, e.g. the
    service variables), `envFrom` sources, then the container's `env` in order, each value
    expanded against those before it. `valueFrom` needs `pod` (and `lookup` for ConfigMap
    and Secret keys); without them such variables are left out."""
    env: dict[str, str] = {"PATH": DEFAULT_PATH, "HOSTNAME": pod_name, "HOME": "/root"}
    env.update(defaults or {})
    for source in container.get("envFrom") or []:
        for kind, key in (("configMap", "configMapRef"), ("secret", "secretRef")):
            if key in source and lookup is not None:
                data = lookup(kind, source[key]["name"])
                if data is None and not source[key].get("optional"):
                    raise MissingReferenceError(f"{kind} {source[key]['name']!r} not found")
                for name, value in (data or {}).items():
                    env[source.get("prefix", "") + name] = value
    for variable in container.get("env") or []:
        if "valueFrom" in variable and "value" not in variable:
            if pod is None:
                continue
            resolved = _value_from(pod, variable["valueFrom"], lookup)
            if resolved is not None:
                env[variable["name"]] = resolved
            continue
        env[variable["name"]] = expand_variables(str(variable.get("value", "")), env)
    return env
