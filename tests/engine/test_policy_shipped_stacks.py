"""The shipped stacks (stacks/Pulumi.{dev,staging,prod}.yaml) pass the policy pack: no
mandatory violation, and the production stack (replicas 2, a memory limit, leader election,
a Retain class) no finding at all even when it declares itself production."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from localcluster import LocalCluster
from scripts.pulumi_engine import PulumiEngine
from tests.engine.support import ROOT, StackFactory, StackNames
from tests.policy.engine import PolicyStack, violations
from tests.policy.support import policy_pack_copy

STACKS = ("dev", "staging", "prod")


def shipped_config(stack: str) -> dict[str, Any]:
    document = yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text("utf-8"))
    return dict(document["config"])


@pytest.fixture(scope="module")
def shipped(
    pulumi_engine: PulumiEngine, cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, PolicyStack]]:
    """Each shipped stack's config, verbatim, in a scratch stack (previews only)."""
    work = tmp_path_factory.mktemp("policy-shipped")
    factory = StackFactory(pulumi_engine, cluster, work, work / "state")
    pack = policy_pack_copy(work / "policy")
    stacks = {
        name: PolicyStack(factory.create(shipped_config(name), StackNames.fresh()), pack)
        for name in STACKS
    }
    yield stacks
    factory.cleanup()


@pytest.mark.parametrize("name", STACKS)
def test_a_shipped_stack_passes_the_pack_verbatim(
    shipped: dict[str, PolicyStack], name: str
) -> None:
    """No mandatory violation in any shipped stack; dev and staging (one replica) get the
    production-readiness advice as warnings; prod declares itself production and has no
    finding at all."""
    passed, output = shipped[name].run({})
    assert passed, output
    found = violations(output)
    assert all(level == "advisory" for level, _ in found), found
    if name == "prod":
        assert found == []
    else:
        assert found, output
