"""The removal gate's permits for tests that build removing helper steps: asked of the gate
itself (the only way to one), from a proof that holds."""

from __future__ import annotations

from collections.abc import Iterable

from provisioner.helper_pods.pod_shapes import HelperTarget
from provisioner.provisioning.removal_gate import (
    RemovalKind,
    RemovalPermit,
    RemovalProof,
    decide_removal,
)


def permit_for(target: HelperTarget, kind: RemovalKind = RemovalKind.TEARDOWN) -> RemovalPermit:
    decision = decide_removal(
        RemovalProof(
            kind=kind,
            volume_name=target.volume_name,
            path=target.path,
            base_path=target.base_path,
            sharing=(),
            holds_lease=True,
            claim_volume_seen=False,
            clone_verdict_before_save=True,
        )
    )
    assert isinstance(decision, RemovalPermit), decision
    return decision


def permits_for(
    targets: Iterable[HelperTarget], kind: RemovalKind = RemovalKind.TEARDOWN
) -> dict[str, RemovalPermit]:
    return {target.volume_name: permit_for(target, kind) for target in targets}
