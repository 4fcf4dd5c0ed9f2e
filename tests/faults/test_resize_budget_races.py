"""A resize in flight and a provision on the same full path: the budget must never be
over-committed, whatever comes between. While the PV's PATCH to the new size is on its way,
every PV event (a label, the 900 s resync) still carries the old size; the book must keep
counting the new one. A PATCH that fails after the quota was raised keeps it counted too.

A real provisioner runs in this process (`api_answer_faults`), so the test can hold the
resize's PV PATCH, answer it 503, and send a PV event in between.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from localcluster import LocalCluster, wait_for
from localcluster.raw_api import call_json
from provisioner.configuration.config import DEFAULT_NODE
from provisioner.objects.quantities import quantity_to_bytes
from tests.faults.api_answer_faults import provisioner_with_faults
from tests.faults.support import events_with_reason, unique_base_path
from tests.provisioner.e2e.support import ConfigFiles, ProvisionerSetup

pytestmark = pytest.mark.cluster

NODE = {"kubernetes.io/hostname": "node-1"}
GI = 1024**3
TOUCHED = "example.com/touched"


def committed_bytes(setup: ProvisionerSetup, base: str) -> int:
    """What the PVs under the base path hold now, by their spec.capacity."""
    total = 0
    for volume in call_json(setup.core.list_persistent_volume)["items"]:
        source = volume["spec"].get("hostPath") or volume["spec"].get("local") or {}
        if str(source.get("path", "")).startswith(f"{base}/"):
            total += quantity_to_bytes(volume["spec"]["capacity"]["storage"])
    return total


def test_a_provision_during_a_resize_never_takes_the_room_it_grows_into(
    make_setup: Callable[..., ProvisionerSetup], cluster: LocalCluster
) -> None:
    base = unique_base_path("resize")
    config = {
        "nodePathMap": [
            {"node": DEFAULT_NODE, "paths": []},
            {"node": "node-1", "paths": [{"path": base, "capacity": "3Gi", "create": True}]},
        ]
    }
    setup = make_setup(ConfigFiles(config=config))
    with provisioner_with_faults(setup, cluster) as (provisioner, faults):
        grow = setup.create_class("grow")
        call_json(setup.storage.patch_storage_class, grow, {"allowVolumeExpansion": True})
        setup.create_claim("a", grow, size="1Gi")
        setup.create_consumer("a", "a", NODE)
        name = setup.wait_bound("a")["metadata"]["name"]

        # a grows to 2Gi: the quota step runs, then its PV PATCH is held and answered 503.
        patch = faults.arm(
            "PATCH", lambda path: path == f"/api/v1/persistentvolumes/{name}", 503, hold_last=True
        )
        setup.core.patch_namespaced_persistent_volume_claim(
            "a", setup.namespace, {"spec": {"resources": {"requests": {"storage": "2Gi"}}}}
        )
        wait_for(lambda: patch.holding.is_set() or None, 120, "the resize's PV PATCH")
        # Meanwhile a PV event with the old size, as any update or the resync brings.
        setup.core.patch_persistent_volume(name, {"metadata": {"annotations": {TOUCHED: "1"}}})
        volumes = provisioner.caches.volumes
        wait_for(
            lambda: TOUCHED in getattr(volumes.get(name), "annotations", {}) or None,
            30,
            "the provisioner to see the PV event",
        )

        # b asks for 2Gi on the same path: 1Gi live growing to 2Gi leaves 1Gi.
        setup.create_claim("b", grow, size="2Gi")
        setup.create_consumer("b", "b", NODE)

        def bound_or_refused() -> str | None:
            if setup.phase("b") == "Bound":
                return "bound"
            failed = events_with_reason(setup, "b", "ProvisioningFailed")
            return "refused" if any("room" in e["message"] for e in failed) else None

        first = wait_for(bound_or_refused, 60, "b to bind or be refused for room")
        patch.release()
        assert first == "refused", "b took the room a's resize grows into"
        # The PATCH failed after the quota was raised; the retry carries the resize out.
        setup.wait_event("a", "VolumeResizeSuccessful", timeout=120)
        assert committed_bytes(setup, base) == 2 * GI
        assert setup.phase("b") == "Pending"
