"""Whether the stack deploys the CSIDriver that makes the kube-scheduler see path budgets.

The scheduler's volume binding looks up the CSIDriver named as the StorageClass's provisioner;
with `storageCapacity: true` it then schedules a WaitForFirstConsumer claim's pod only on a
node for which some CSIStorageCapacity object of that class has room, and treats a node
without one as full. The provisioner publishes those objects only when a path declares a
capacity (`{"path": ..., "capacity": ...}`), so a CSIDriver without any declared capacity
would leave every pod of our classes unschedulable: it is deployed only when both hold.
A CSIDriver's name is a DNS subdomain of at most 63 characters (no "/"), stricter than a
provisioner name: with a name it cannot take, there is nothing the scheduler could find, and
preview says so instead of failing (the provisioner still keeps to the budgets itself).
Pure functions on the stack's config.json document, tested without the engine.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from components.stack_values import DNS_SUBDOMAIN

CSI_DRIVER_NAME_LIMIT = 63


def _lower_keys(value: object) -> Mapping[str, Any]:
    """config.json keys match case-insensitively, as the runtime reads them."""
    if not isinstance(value, Mapping):
        return {}
    return {str(key).lower(): item for key, item in value.items()}


def declares_capacity(document: object) -> bool:
    """Whether any nodePathMap path of config.json (top level or of a class) is the object
    form with a `capacity`."""
    keys = _lower_keys(document)
    for entry in keys.get("nodepathmap") or ():
        for path in _lower_keys(entry).get("paths") or ():
            if "capacity" in _lower_keys(path):
                return True
    classes = _lower_keys(keys.get("storageclassconfigs"))
    return any(declares_capacity(config) for config in classes.values())


def csi_driver_name_problem(provisioner_name: str) -> str | None:
    """Why a CSIDriver cannot be named `provisioner_name` (Kubernetes' ValidateCSIDriverName),
    or None."""
    if len(provisioner_name) <= CSI_DRIVER_NAME_LIMIT and DNS_SUBDOMAIN.fullmatch(
        provisioner_name.lower()
    ):
        return None
    return (
        f"{json.dumps(provisioner_name)} cannot name the CSIDriver through which the "
        "kube-scheduler sees the paths' capacities (a DNS subdomain of at most "
        f'{CSI_DRIVER_NAME_LIMIT} characters, without "/"), so none is deployed and the '
        "scheduler may place pods on full nodes (the provisioner then asks it to choose "
        "again); use a provisionerName such as local-path-storage.io (a rename: see "
        'components/README.md, "What a change does"), or set capacityAwareScheduling to false'
    )
