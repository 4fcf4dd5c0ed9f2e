"""Render mode (renderYamlToDirectory, the Argo CD / Flux route) runs the same pack: a
violation fails the render's preview before anything is written, and the rendering `up`
without writing the offending object (objects checked clean before it may already be
written: the engine checks each object before its step); a clean stack renders."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from localcluster import LocalCluster
from scripts.pulumi_engine import PulumiEngine
from tests.engine.support import StackFactory, StackNames, base_config
from tests.policy.engine import PINNED_HELPER, PolicyStack, violations
from tests.policy.support import policy_pack_copy


@pytest.fixture(scope="module")
def rendering(
    pulumi_engine: PulumiEngine, cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[PolicyStack, Path]]:
    work = tmp_path_factory.mktemp("policy-render")
    factory = StackFactory(pulumi_engine, cluster, work, work / "state")
    names = StackNames.fresh()
    out = work / "manifests-out"
    config = {**base_config(names), **PINNED_HELPER, "renderYamlToDirectory": str(out)}
    stack = factory.create(config, names, kubeconfig=False)
    yield PolicyStack(stack, policy_pack_copy(work / "policy")), out
    factory.cleanup()


def test_a_violation_fails_the_render_without_writing_the_offending_object(
    rendering: tuple[PolicyStack, Path],
) -> None:
    stack, out = rendering
    kubelet = {"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": ["/var/lib/kubelet/pv"]}
    for up in (False, True):
        passed, output = stack.run({"nodePathMap": [kubelet]}, up=up)
        assert not passed
        assert ("mandatory", "safe-storage-paths") in violations(output)
        assert '"/var/lib/kubelet/pv" lies in the system directory /var/lib/kubelet' in output
        if not up:
            assert not any(out.rglob("*.yaml"))
    assert not any("/var/lib/kubelet" in path.read_text("utf-8") for path in out.rglob("*.yaml"))

    passed, output = stack.run({}, up=True)
    assert passed, output
    assert any("ConfigMap" in path.read_text("utf-8") for path in out.rglob("*.yaml"))
