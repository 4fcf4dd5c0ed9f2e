"""`pulumi destroy` strands no finalizer: the deployed provisioner pod, told to stop while its
installation is being removed, takes its finalizer off the volumes it provisioned, and leaves
the volumes and their data alone. Afterwards a PersistentVolume of that installation can be
deleted like any other (before, it stayed Terminating with nothing left to remove the
finalizer), and its directory is still on the node."""

from __future__ import annotations

from localcluster import LocalCluster, wait_for
from tests.engine.support import (
    StackFactory,
    api_get,
    api_request,
    up_with_a_bound_claim,
    volume_location,
)

FINALIZER = "external-provisioner.volume.kubernetes.io/finalizer"


def test_destroy_lets_go_of_the_finalizer_and_keeps_the_data(
    stacks: StackFactory, cluster: LocalCluster
) -> None:
    stack, tenant, volume = up_with_a_bound_claim(stacks, "kept")
    volume_name = volume["metadata"]["name"]
    volume_path = f"/api/v1/persistentvolumes/{volume_name}"
    _, _, on_disk = volume_location(cluster, volume)
    (on_disk / "data.txt").write_text("the tenant's data\n", encoding="utf-8")

    def carries_finalizer() -> bool | None:
        current = api_get(cluster, volume_path) or {}
        return True if FINALIZER in (current.get("metadata", {}).get("finalizers") or []) else None

    # The provisioner adds it to a Bound Delete-policy volume: the state destroy must undo.
    wait_for(carries_finalizer, 30, f"{volume_name} to carry {FINALIZER}")

    stack.destroy()

    survivor = api_get(cluster, volume_path)
    assert survivor is not None, "destroy must keep the volume"
    assert survivor["status"]["phase"] == "Bound"
    assert FINALIZER not in (survivor["metadata"].get("finalizers") or []), (
        f"{volume_name} still carries {FINALIZER} after destroy: {survivor['metadata']}"
    )
    assert (on_disk / "data.txt").read_text(encoding="utf-8") == "the tenant's data\n"

    tenant.delete_claim("kept")
    status, answer = api_request(cluster, "DELETE", volume_path)
    assert status in (200, 202), answer
    wait_for(
        lambda: True if api_get(cluster, volume_path) is None else None,
        30,
        f"{volume_name} to be gone once deleted",
    )
    assert (on_disk / "data.txt").read_text(encoding="utf-8") == "the tenant's data\n"
