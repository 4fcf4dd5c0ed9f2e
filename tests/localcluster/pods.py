"""Pod manifests the harness tests create."""

from __future__ import annotations

from typing import Any

from localcluster import HELPER_POD_LABEL, HELPER_POD_LABEL_VALUE


def helper_pod(
    name: str,
    node: str,
    script: str,
    *,
    env: dict[str, str] | None = None,
    host_path: str = "/opt/lps",
    image: str = "busybox",
    extra_volumes: list[dict[str, Any]] | None = None,
    extra_mounts: list[dict[str, Any]] | None = None,
    active_deadline_seconds: int | None = None,
) -> dict[str, Any]:
    """A helper-labelled pod bound to `node` that runs `sh -c script` with the node's
    `host_path` mounted at the same path."""
    spec: dict[str, Any] = {
        "nodeName": node,
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "containers": [
            {
                "name": "helper",
                "image": image,
                "command": ["sh", "-c", script],
                "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
                "terminationMessagePolicy": "FallbackToLogsOnError",
                "volumeMounts": [{"name": "data", "mountPath": host_path}, *(extra_mounts or [])],
            }
        ],
        "volumes": [
            {"name": "data", "hostPath": {"path": host_path, "type": "DirectoryOrCreate"}},
            *(extra_volumes or []),
        ],
    }
    if active_deadline_seconds is not None:
        spec["activeDeadlineSeconds"] = active_deadline_seconds
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {HELPER_POD_LABEL: HELPER_POD_LABEL_VALUE}},
        "spec": spec,
    }


def ordinary_pod(name: str, claim: str | None = None) -> dict[str, Any]:
    """A pod the scheduler places and kwok makes Running (optionally using a claim)."""
    container: dict[str, Any] = {"name": "app", "image": "registry.invalid/app:1"}
    spec: dict[str, Any] = {"containers": [container]}
    if claim:
        spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
        container["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def terminated_state(pod: dict[str, Any]) -> dict[str, Any]:
    state: dict[str, Any] = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    return state
