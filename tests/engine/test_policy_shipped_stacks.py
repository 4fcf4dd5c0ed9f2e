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
from tests.policy.engine import PINNED_HELPER, PolicyStack, violations
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
def test_a_shipped_stack_with_a_pinned_helper_image_passes(
    shipped: dict[str, PolicyStack], name: str
) -> None:
    production = {"local-path-storage-policy:production": True} if name == "prod" else {}
    passed, output = shipped[name].run({**PINNED_HELPER, **production})
    assert passed, output
    found = violations(output)
    assert all(level == "advisory" for level, _ in found), found
    if name == "prod":
        assert found == []


@pytest.mark.parametrize("name", STACKS)
def test_a_shipped_stack_verbatim_fails_on_nothing_but_its_unpinned_helper_image(
    shipped: dict[str, PolicyStack], name: str
) -> None:
    """The shipped stacks keep the default helper template's image `busybox` (no tag, so
    :latest), which pinned-helper-image refuses until stacks/ set helperImage or the default
    template pins it (issue 11); everything else in them passes."""
    passed, output = shipped[name].run({})
    mandatory = [policy for level, policy in violations(output) if level == "mandatory"]
    assert passed or mandatory == ["pinned-helper-image"], output
