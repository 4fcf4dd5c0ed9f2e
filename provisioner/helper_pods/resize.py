"""The resize entry for volume expansion: the helper pod that sets an existing volume's new hard
limit where its filesystem enforces project quotas (see `quota`)."""

from __future__ import annotations

import hashlib
from typing import Any

from provisioner.capacity.quota import PROJECT_ID_PROBES, QUOTA_SCRIPT, project_id_for
from provisioner.configuration.config import ConfigBundle
from provisioner.helper_pods.pod_shapes import (
    BASE_VIEW,
    BASE_VOLUME,
    DATA_VOLUME,
    GUARD_SCRIPT,
    HELPER_ACTION_LABEL,
    HelperTarget,
    helper_pod_frame,
)
from provisioner.provisioning.paths import is_strictly_inside
from provisioner.scans.node_scripts import RESULT_PATH


def build_resize_helper_pod(
    target: HelperTarget,
    new_size_bytes: int,
    bundle: ConfigBundle,
    namespace: str,
    service_account: str,
) -> dict[str, Any]:
    """The helper pod that sets `target`'s hard limit to `new_size_bytes` where its filesystem
    enforces project quotas, and otherwise succeeds doing nothing (its termination message
    says which: `quota PROJECT BYTES` or `no-quota WHY`). Run it with
    `PodRunner.run_for_message` before growing the PV; a failure means the limit was not
    raised. The guard first checks that VOL_DIR is the real directory, as for setup."""
    if not target.base_path or not is_strictly_inside(target.path, target.base_path):
        raise ValueError(f"volume path {target.path!r} is not inside {target.base_path!r}")
    pod = helper_pod_frame(
        bundle,
        namespace,
        service_account,
        name=f"helper-resize-{hashlib.sha256(target.volume_name.encode()).hexdigest()[:16]}",
        labels={HELPER_ACTION_LABEL: "resize"},
        node_name=target.node_name,
    )
    spec = pod["spec"]
    spec["volumes"] = [
        {"name": BASE_VOLUME, "hostPath": {"path": target.base_path, "type": "Directory"}},
        {"name": DATA_VOLUME, "hostPath": {"path": target.path, "type": "Directory"}},
    ]
    container = spec["containers"][0]
    container["volumeMounts"] = [
        {"name": BASE_VOLUME, "mountPath": BASE_VIEW, "readOnly": True},
        {"name": DATA_VOLUME, "mountPath": target.path, "readOnly": True},
    ]
    env = {
        "VOL_DIR": target.path,
        "LPS_BASE": target.base_path,
        "LPS_BASE_VIEW": BASE_VIEW,
        "LPS_SCRIPT": QUOTA_SCRIPT,
        "LPS_QUOTA_MODE": "resize",
        "LPS_RESULT": RESULT_PATH,
        "LPS_PROJECT_ID": str(project_id_for(target.volume_name)),
        "LPS_PROJECT_ID_PROBES": str(PROJECT_ID_PROBES),
        "LPS_SIZE": str(new_size_bytes),
    }
    container["command"], container["args"] = ["/bin/sh", "-c", GUARD_SCRIPT, "resize"], []
    kept = [e for e in container.get("env") or () if e.get("name") not in env]
    container["env"] = kept + [{"name": k, "value": v} for k, v in env.items()]
    container["terminationMessagePath"] = RESULT_PATH
    container["terminationMessagePolicy"] = "FallbackToLogsOnError"
    return pod
