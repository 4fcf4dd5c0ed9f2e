"""The node's steps are the helper pod's containers, run as processes: same argv, same
environment, but for where the guard sees the base path."""

from __future__ import annotations

from typing import Any

import pytest

from provisioner.configuration.config import (
    DEFAULT_HELPER_POD_YAML,
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
    load_config_bundle,
)
from provisioner.helper_pods.pod_shapes import BASE_VIEW, build_helper_pod, step_command
from provisioner.node_volumes.volume_steps import (
    NodeStep,
    VolumeTarget,
    failed_setup_clean_up,
    node_steps,
)
from provisioner.objects.node_handoff import NodeRemoval, VolumeSetup
from provisioner.provisioning.volume_decisions import TeardownPlan
from tests.provisioner.removal_permits import permit_for

BUNDLE = load_config_bundle(
    '{"nodePathMap": [{"node": "n1", "paths": [{"path": "/data", "create": false,'
    ' "mountPoint": true}]}]}',
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
    DEFAULT_HELPER_POD_YAML,
)
SETUP = VolumeSetup(
    base_path="/data",
    path="/data/ns/claim",
    volume_mode="Filesystem",
    size_bytes=1 << 30,
    vol_user="1000",
    vol_perm="0770",
)
TARGET = VolumeTarget.of("pvc-1", "n1", SETUP)
REMOVAL = NodeRemoval("pvc-1", "/data/ns/claim", "pvc-1", False, True, "uid-1")


def pod_containers(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    spec = pod["spec"]
    return {c["name"]: c for c in [*(spec.get("initContainers") or ()), *spec["containers"]]}


def as_step(container: dict[str, Any]) -> tuple[tuple[str, ...], dict[str, str]]:
    env = {e["name"]: e["value"] for e in container["env"]}
    return (*container["command"], *container.get("args", ())), env


def on_the_node(env: dict[str, str]) -> dict[str, str]:
    """The pod's environment with the base path seen where the node plugin sees it."""
    return {k: v.replace(BASE_VIEW, SETUP.base_path) for k, v in env.items()}


def compare(step: NodeStep, container: dict[str, Any]) -> None:
    argv, env = as_step(container)
    assert step.argv == argv
    assert dict(step.env) == on_the_node(env)
    assert list(step.env) == list(env)


def test_a_setup_runs_the_pods_prepare_and_create_containers() -> None:
    steps = node_steps("create", TARGET, BUNDLE)
    assert [s.name for s in steps] == ["prepare", "create"]
    containers = pod_containers(build_helper_pod("create", TARGET, BUNDLE, "ns", "sa"))
    compare(steps[0], containers["prepare"])
    (setup_container,) = [c for name, c in containers.items() if name != "prepare"]
    compare(steps[1], setup_container)
    assert steps[1].env["LPS_BASE_VIEW"] == "/data"


def test_a_teardown_runs_the_pods_teardown_then_finish_with_the_permits_check() -> None:
    plan = TeardownPlan(
        volume_name="pvc-1",
        path=SETUP.path,
        node_name="n1",
        volume_mode="Filesystem",
        size_bytes=SETUP.size_bytes,
        delete_volume=True,
        remove_finalizer=True,
        base_path="/data",
        vol_user="1000",
        vol_perm="0770",
    )
    pod = build_helper_pod("delete", plan, BUNDLE, "ns", "sa", permit=permit_for(plan))
    containers = pod_containers(pod)
    steps = node_steps("delete", TARGET, BUNDLE, removal=REMOVAL)
    assert [s.name for s in steps] == ["delete", "finish"]
    compare(steps[0], containers["teardown"])
    compare(steps[1], containers["finish"])
    # The mount point check looks where the base path is: at its own path on the node.
    assert steps[0].env["LPS_MOUNT_POINT"] == "/data"


def test_a_setup_always_prepares_even_a_directory_named_for_its_volume() -> None:
    named = VolumeTarget.of(
        "pvc-1",
        "n1",
        VolumeSetup(base_path="/data", path="/data/pvc-1", volume_mode="Filesystem", size_bytes=1),
    )
    assert [s.name for s in node_steps("create", named, BUNDLE)] == ["prepare", "create"]


@pytest.mark.parametrize(
    "removal",
    [
        None,
        NodeRemoval("pvc-2", "/data/ns/claim", "pvc-2", False, True, "uid-1"),
        NodeRemoval("pvc-1", "/data/ns/other", "pvc-1", False, True, "uid-1"),
    ],
)
def test_a_teardown_is_built_only_with_the_permit_for_that_volume_and_path(
    removal: NodeRemoval | None,
) -> None:
    with pytest.raises(ValueError, match="only with the removal gate's permit"):
        node_steps("delete", TARGET, BUNDLE, removal=removal)


def test_a_path_outside_its_base_path_gets_no_step() -> None:
    outside = VolumeTarget.of("pvc-1", "n1", VolumeSetup("/data", "/etc", "Filesystem", 1))
    with pytest.raises(ValueError, match="not strictly inside"):
        node_steps("create", outside, BUNDLE)


def test_the_clean_up_after_a_failed_setup_runs_only_with_the_gate_s_permit() -> None:
    permit = NodeRemoval(TARGET.volume_name, TARGET.path, "pvc-1", True, False, "uid-1")
    (finish,) = failed_setup_clean_up(TARGET, BUNDLE, permit)
    assert finish.name == "finish"
    assert finish.env["LPS_REMOVAL_OWNER"] == "pvc-1"
    assert finish.env["LPS_REMOVAL_MADE_ONLY"] == "true"
    assert "LPS_REMOVAL_ABSENT_OK" not in finish.env
    # No permit (the gate gave none, e.g. reuseExistingData), or one for another directory:
    # the directory stays for the retry.
    assert failed_setup_clean_up(TARGET, BUNDLE, None) == ()
    elsewhere = NodeRemoval(TARGET.volume_name, "/data/other", "pvc-1", True, False, "uid-1")
    assert failed_setup_clean_up(TARGET, BUNDLE, elsewhere) == ()


@pytest.mark.parametrize("step", ["delete", "finish"])
def test_a_removing_step_has_no_command_without_an_owner_check(step: str) -> None:
    with pytest.raises(ValueError, match="owner check"):
        step_command(step, TARGET, BUNDLE, removal={})  # type: ignore[arg-type]
