"""What the capacity tests share: a provisioner name a CSIDriver can carry, the CSIDriver the
Pulumi component deploys (made here by hand), and reading the published capacities."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from kubernetes.client.exceptions import ApiException

from localcluster.raw_api import call_json, manifest
from provisioner.objects.quantities import quantity_to_bytes
from tests.provisioner.e2e.support import ProvisionerSetup

GI = 1024**3


def use_driver_name(setup: ProvisionerSetup) -> None:
    """A CSIDriver is named after the provisioner, and its name cannot hold a "/"."""
    setup.name = f"cap-{setup.suffix}.lps.io"


@contextlib.contextmanager
def csi_driver(setup: ProvisionerSetup) -> Iterator[None]:
    setup.storage.create_csi_driver(
        manifest(
            {
                "metadata": {"name": setup.name},
                "spec": {
                    "attachRequired": False,
                    "podInfoOnMount": False,
                    "storageCapacity": True,
                    "volumeLifecycleModes": ["Persistent"],
                },
            }
        )
    )
    try:
        yield
    finally:
        with contextlib.suppress(ApiException):
            setup.storage.delete_csi_driver(setup.name)


def published(setup: ProvisionerSetup, storage_class: str) -> dict[str, int]:
    """hostname -> maximumVolumeSize in bytes, of the class's CSIStorageCapacity objects."""
    listed = call_json(setup.storage.list_namespaced_csi_storage_capacity, setup.namespace)
    found: dict[str, int] = {}
    for item in listed["items"]:
        if item.get("storageClassName") == storage_class:
            host = item["nodeTopology"]["matchLabels"]["kubernetes.io/hostname"]
            found[host] = quantity_to_bytes(str(item["maximumVolumeSize"]))
    return found


def pod(setup: ProvisionerSetup, name: str) -> dict[str, Any]:
    return call_json(setup.core.read_namespaced_pod, name, setup.namespace)
