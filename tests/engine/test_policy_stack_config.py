"""The policy pack in `pulumi preview`: stack values the program accepts but the pack refuses
fail the preview with the policy's name and message; advisory findings warn and pass; a
stack's opt-in lifts its helper-pod policy; the pack's config file sets levels and paths."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from localcluster import LocalCluster
from scripts.pulumi_engine import PulumiEngine
from tests.engine.support import StackFactory
from tests.policy.engine import PINNED_HELPER, PolicyStack, violations
from tests.policy.support import policy_pack_copy

KUBELET_PATHS = {
    "nodePathMap": [
        {"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": ["/var/lib/kubelet/volumes"]}
    ]
}
PRIVILEGED_TEMPLATE = {
    "apiVersion": "v1",
    "kind": "Pod",
    "spec": {
        "hostPID": True,
        "containers": [
            {"name": "helper", "image": "busybox:1.37.0", "securityContext": {"privileged": True}}
        ],
    },
}


@pytest.fixture(scope="module")
def policy_stack(
    pulumi_engine: PulumiEngine, cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PolicyStack]:
    work = tmp_path_factory.mktemp("policy-stack-config")
    factory = StackFactory(pulumi_engine, cluster, work, work / "state")
    stack = factory.create()
    yield PolicyStack(stack, policy_pack_copy(work / "policy"))
    factory.cleanup()


def mandatory(output: str) -> list[str]:
    return sorted(name for level, name in violations(output) if level == "mandatory")


def test_a_kubelet_directory_fails_preview_with_the_path_and_the_fix(
    policy_stack: PolicyStack,
) -> None:
    passed, output = policy_stack.run({**PINNED_HELPER, **KUBELET_PATHS})
    assert not passed
    assert mandatory(output) == ["safe-storage-paths"]
    assert (
        'config.json.nodePathMap[0].paths[0]: "/var/lib/kubelet/volumes" lies in the system '
        "directory /var/lib/kubelet" in output
    )
    assert "choose a dedicated data directory" in output


def test_a_kubelet_directory_with_a_budget_fails_preview_too(policy_stack: PolicyStack) -> None:
    """The path object form (needs the runtime model that accepts it): a capacity does not
    make a system directory safe."""
    budgeted = {
        "nodePathMap": [
            {
                "node": "DEFAULT_PATH_FOR_NON_LISTED_NODES",
                "paths": [{"path": "/var/lib/kubelet/volumes", "capacity": "10Gi"}],
            }
        ]
    }
    passed, output = policy_stack.run({**PINNED_HELPER, **budgeted})
    assert not passed
    assert mandatory(output) == ["safe-storage-paths"]
    assert (
        'config.json.nodePathMap[0].paths[0].path: "/var/lib/kubelet/volumes" lies in the '
        "system directory /var/lib/kubelet" in output
    )


@pytest.mark.parametrize(
    ("changes", "policy", "words", "opt_in"),
    [
        pytest.param(
            {"allowUnsafeHelperTemplate": True},
            "no-unsafe-helper-template",
            "runs with --allow-unsafe-helper-template",
            {"local-path-storage-policy:allowUnsafeHelperTemplate": True},
            id="unsafe-template-flag",
        ),
        pytest.param(
            {
                "allowUnsafeHelperTemplate": True,
                "local-path-storage-policy:allowUnsafeHelperTemplate": True,
                "helperPodTemplate": PRIVILEGED_TEMPLATE,
            },
            "unprivileged-helper-pod",
            "helperPod.yaml: spec.hostPID: must not be true",
            {"local-path-storage-policy:allowPrivilegedHelper": True},
            id="privileged-template",
        ),
        pytest.param(
            {"helperImage": "busybox:latest"},
            "pinned-helper-image",
            '"busybox:latest" is :latest',
            {"local-path-storage-policy:allowUnpinnedHelperImage": True},
            id="latest-helper-image",
        ),
    ],
)
def test_a_helper_pod_risk_fails_preview_until_the_stack_opts_in(
    policy_stack: PolicyStack,
    changes: dict[str, Any],
    policy: str,
    words: str,
    opt_in: dict[str, Any],
) -> None:
    passed, output = policy_stack.run({**PINNED_HELPER, **changes})
    assert not passed
    assert mandatory(output) == [policy]
    assert words in output

    passed, output = policy_stack.run({**PINNED_HELPER, **changes, **opt_in})
    assert passed, output
    assert mandatory(output) == []


def test_production_findings_warn_and_fail_only_a_production_stack(
    policy_stack: PolicyStack,
) -> None:
    changes = {**PINNED_HELPER, "replicas": 1, "memoryLimit": "", "leaderElection": False}
    passed, output = policy_stack.run(changes)
    assert passed, output
    assert violations(output) == [("advisory", "production-readiness")] * 4
    for words in ("1 replica", "no memory limit", "leader election is off", "reclaimPolicy Delete"):
        assert words in output

    passed, output = policy_stack.run({**changes, "local-path-storage-policy:production": True})
    assert not passed
    assert mandatory(output) == ["production-readiness"] * 4


def test_the_pack_config_file_sets_system_paths_and_levels(
    policy_stack: PolicyStack, tmp_path: Path
) -> None:
    config_file = tmp_path / "policy-config.json"
    config_file.write_text(
        json.dumps(
            {
                "safe-storage-paths": {"systemPaths": ["/opt"]},
                "pinned-helper-image": "advisory",
                "production-readiness": "disabled",
            }
        ),
        encoding="utf-8",
    )
    passed, output = policy_stack.run({"helperImage": "busybox:latest"}, config_file)
    assert not passed
    assert sorted(violations(output)) == [
        ("advisory", "pinned-helper-image"),
        ("mandatory", "safe-storage-paths"),
    ]
    assert '"/opt/local-path-provisioner" lies in the system directory /opt' in output
