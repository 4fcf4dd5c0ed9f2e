"""A real engine's preview of a stack with a CSI class (storageClasses[].volumeType: csi)
plans the node plugin's DaemonSet, its CSIDriver and its admission policy, and the policy pack
passes them; the same stack without the CSI class plans none of them. Render mode: the preview
contacts no cluster."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from localcluster import LocalCluster
from scripts.pulumi_engine import PulumiEngine
from tests.engine.support import EngineStack, Outcome, StackFactory, StackNames, base_config
from tests.policy.engine import PINNED_HELPER
from tests.policy.support import policy_pack_copy

NEW_TYPES = {
    "kubernetes:apps/v1:DaemonSet",
    "kubernetes:storage.k8s.io/v1:CSIDriver",
    "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy",
    "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding",
}


@pytest.fixture(scope="module")
def rendering(
    pulumi_engine: PulumiEngine, cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[EngineStack, Path]]:
    work = tmp_path_factory.mktemp("csi-preview")
    factory = StackFactory(pulumi_engine, cluster, work, work / "state")
    names = StackNames.fresh()
    config = {**base_config(names), **PINNED_HELPER, "renderYamlToDirectory": str(work / "out")}
    stack = factory.create(config, names, kubeconfig=False)
    yield stack, policy_pack_copy(work / "policy")
    factory.cleanup()


def preview(stack: EngineStack, pack: Path, changes: dict[str, Any]) -> Outcome:
    original = stack.stack_file.read_text(encoding="utf-8")
    document = yaml.safe_load(original)
    for key, value in changes.items():
        document["config"][f"local-path-storage:{key}"] = value
    stack.stack_file.write_text(yaml.safe_dump(document), encoding="utf-8")
    try:
        return stack.preview(policy_packs=[str(pack)])
    finally:
        stack.stack_file.write_text(original, encoding="utf-8")


def planned_types(outcome: Outcome) -> set[str]:
    return {change.type for change in outcome.changes if change.op == "create"}


def test_a_csi_class_brings_the_node_plugin_and_none_comes_without(
    rendering: tuple[EngineStack, Path],
) -> None:
    stack, pack = rendering
    without = planned_types(preview(stack, pack, {}))
    assert "kubernetes:apps/v1:Deployment" in without
    assert without.isdisjoint(NEW_TYPES)

    classes = [
        *base_config(stack.names)["storageClasses"],
        {"name": f"{stack.names.class_name}-csi", "volumeType": "csi"},
    ]
    outcome = preview(stack, pack, {"storageClasses": classes})
    assert planned_types(outcome) >= NEW_TYPES, outcome.output
    # The node plugin's ClusterRole beside the provisioner's.
    creates = outcome.of("create")
    assert (
        "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole",
        "local-path-storage-node-plugin-clusterrole",
    ) in creates
    assert "[mandatory]" not in outcome.output


def test_a_snapshot_class_is_planned_for_a_csi_class_and_passes_the_pack(
    rendering: tuple[EngineStack, Path],
) -> None:
    """The VolumeSnapshotClass (a custom resource whose fields are top-level) goes through the
    real engine and provider; rendering, no CRD is read."""
    stack, pack = rendering
    classes = [
        *base_config(stack.names)["storageClasses"],
        {
            "name": f"{stack.names.class_name}-csi",
            "volumeType": "csi",
            "snapshotClass": {"deletionPolicy": "Retain", "default": True},
        },
    ]
    outcome = preview(stack, pack, {"storageClasses": classes})
    assert "kubernetes:snapshot.storage.k8s.io/v1:VolumeSnapshotClass" in planned_types(outcome), (
        outcome.output
    )
    assert "volumesnapshotclasses.snapshot.storage.k8s.io" not in outcome.output
    assert "[mandatory]" not in outcome.output
