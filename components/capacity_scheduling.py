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
A pure function, tested without the engine; whether a path declares a capacity is the
runtime model's `ProvisionerConfig.declares_capacity`.
"""

from __future__ import annotations

import json

from components.stack_values import DNS_SUBDOMAIN

CSI_DRIVER_NAME_LIMIT = 63


def csi_driver_name_problem(provisioner_name: str, csi_driver: str | None = None) -> str | None:
    """Why a CSIDriver cannot be named `provisioner_name` (Kubernetes' ValidateCSIDriverName),
    or None. `csi_driver`: the name of the CSIDriver the stack deploys for its csi classes
    (node_plugin.driver_name), which the scheduler does not look up for capacities."""
    if len(provisioner_name) <= CSI_DRIVER_NAME_LIMIT and DNS_SUBDOMAIN.fullmatch(
        provisioner_name.lower()
    ):
        return None
    deployed = (
        "none is deployed"
        if csi_driver is None
        else f"the csi classes' CSIDriver {json.dumps(csi_driver)} is deployed without"
        " storageCapacity"
    )
    return (
        f"{json.dumps(provisioner_name)} cannot name the CSIDriver through which the "
        "kube-scheduler sees the paths' capacities (a DNS subdomain of at most "
        f'{CSI_DRIVER_NAME_LIMIT} characters, without "/"), so {deployed} and the '
        "scheduler may place pods on full nodes (the provisioner then asks it to choose "
        "again); use a provisionerName such as local-path-storage.io (a rename: see "
        'components/README.md, "What a change does"), or set capacityAwareScheduling to false'
    )
