"""A container's environment and downward-API values, as a kubelet computes them.

Why: the provisioner reads its namespace from `POD_NAMESPACE` (a `fieldRef`), and the
kubernetes client's in-cluster config from `KUBERNETES_SERVICE_HOST`/`_PORT`; helper pods
expand `$(VAR)` in their arguments. One interpreter of these rules serves both runners and
the downward-API volume. Pure. Only `value` and `fieldRef` are emulated: nothing the harness
runs on a kwok node takes a ConfigMap or Secret key into its environment (the helper pod
template refuses them, the Deployment uses neither), and a real node's kubelet does it all.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_VARIABLE_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
_SUBSCRIPT = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


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


def container_environment(
    container: Mapping[str, Any],
    pod_name: str,
    *,
    pod: Mapping[str, Any] | None = None,
    defaults: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The process environment: PATH, HOSTNAME and HOME defaults (then `defaults`, e.g. the
    service variables), then the container's `env` in order, each value expanded against those
    before it. A `fieldRef` needs `pod`; without it, and for any other `valueFrom`, the
    variable is left out."""
    env: dict[str, str] = {"PATH": DEFAULT_PATH, "HOSTNAME": pod_name, "HOME": "/root"}
    env.update(defaults or {})
    for variable in container.get("env") or []:
        if "valueFrom" in variable and "value" not in variable:
            field = variable["valueFrom"].get("fieldRef")
            if pod is not None and field is not None:
                env[variable["name"]] = pod_field(pod, field["fieldPath"])
            continue
        env[variable["name"]] = expand_variables(str(variable.get("value", "")), env)
    return env
