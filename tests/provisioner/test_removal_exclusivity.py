"""No code path outside the removal gate can build a helper step that removes a directory.

Read from the source (an AST walk over provisioner/), so a new path cannot slip past it:
- a `RemovalPermit` is constructed only in provisioning/removal_gate.py, and `decide_removal` is
asked
  only by provisioning/removals.py (the facts gatherer); the permit refuses any other construction
  at run time too (see test_removal_gate);
- the scripts that remove or empty a volume's directory are named only by the builders that
  put them in a pod, and every one of those builders takes a permit;
- and, run, each builder refuses to build a removing step without a permit for that very
  volume and path.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Iterator
from pathlib import Path

import pytest

from provisioner.configuration.config import (
    DEFAULT_HELPER_POD_YAML,
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
    load_config_bundle,
)
from provisioner.helper_pods.batch_pod_shapes import VolumePartError, build_batch_helper_pod
from provisioner.helper_pods.clone_step import build_action_pod
from provisioner.helper_pods.pod_shapes import build_helper_pod
from provisioner.provisioning.removal_gate import RemovalKind, RemovalProof, decide_removal
from provisioner.provisioning.volume_decisions import TeardownPlan
from provisioner.scans.node_scripts import build_orphan_removal_pod
from tests.provisioner.removal_permits import permit_for, permits_for

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "provisioner"
GATE = "provisioner/provisioning/removal_gate.py"
GATHERER = "provisioner/provisioning/removals.py"

REMOVING_SCRIPTS = {
    # name: the modules that may name it (its definition, and the builders that ship it)
    "FINISH_SCRIPT": {
        "provisioner/helper_pods/pod_shapes.py",
        "provisioner/helper_pods/batch_pod_shapes.py",
    },
    "BATCH_FINISH_SCRIPT": {"provisioner/helper_pods/batch_pod_shapes.py"},
    "REMOVE_SCRIPT": {"provisioner/scans/node_scripts.py"},
    # The guard runs the teardown code, after the permit's owner check; resize runs it as
    # `resize` (the quota script alone, no teardown code).
    "GUARD_SCRIPT": {
        "provisioner/helper_pods/pod_shapes.py",
        "provisioner/helper_pods/batch_pod_shapes.py",
        "provisioner/helper_pods/resize.py",
    },
    "DEFAULT_TEARDOWN_SCRIPT": {"provisioner/configuration/config.py"},
}
"""The clone step's `empty` (clone_step.py) is not here: it empties only what its own failed copy
wrote, in the directory this attempt's setup just made (a class with reuseExistingData cannot
clone), within the setup's own run; the directory itself stays until `finish` (a permit's)."""
BUILDERS = [build_helper_pod, build_action_pod, build_batch_helper_pod, build_orphan_removal_pod]


def modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        yield str(path.relative_to(ROOT)), ast.parse(path.read_text(), str(path))


def calls_to(tree: ast.Module, name: str) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if called == name:
                lines.append(node.lineno)
    return lines


def names_used(tree: ast.Module) -> set[str]:
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    used |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            used |= {alias.name for alias in node.names}
    return used


def test_only_the_gate_constructs_a_permit_and_only_the_gatherer_asks_it() -> None:
    constructing = {
        module: lines for module, tree in modules() if (lines := calls_to(tree, "RemovalPermit"))
    }
    assert set(constructing) == {GATE}, constructing
    asking = {
        module: lines for module, tree in modules() if (lines := calls_to(tree, "decide_removal"))
    }
    assert set(asking) == {GATHERER}, asking


def test_the_removing_scripts_are_named_only_by_their_builders() -> None:
    for module, tree in modules():
        used = names_used(tree)
        for script, allowed in REMOVING_SCRIPTS.items():
            if script in used:
                assert module in allowed, f"{module} names {script}"


@pytest.mark.parametrize("builder", BUILDERS, ids=lambda builder: builder.__name__)
def test_every_builder_of_a_removing_step_takes_a_permit(builder: object) -> None:
    parameters = inspect.signature(builder).parameters  # type: ignore[arg-type]
    assert any("RemovalPermit" in str(p.annotation) for p in parameters.values()), parameters


BUNDLE = load_config_bundle(
    '{"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES",'
    ' "paths": [{"path": "/data", "create": true}]}]}',
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
    DEFAULT_HELPER_POD_YAML,
)


def teardown(number: int) -> TeardownPlan:
    return TeardownPlan(
        volume_name=f"pvc-{number}",
        path=f"/data/pvc-{number}",
        node_name="n1",
        volume_mode="Filesystem",
        size_bytes=1,
        delete_volume=True,
        remove_finalizer=True,
        base_path="/data",
    )


@pytest.mark.parametrize("step", ["delete", "finish"])
def test_a_removing_step_is_built_only_with_the_permit_for_that_volume(step: str) -> None:
    one, other = teardown(1), teardown(2)
    for permit in (None, permit_for(other)):
        with pytest.raises(ValueError, match="only with the removal gate's permit"):
            build_helper_pod(step, one, BUNDLE, "ns", "sa", permit=permit)  # type: ignore[arg-type]
        if step == "delete":
            with pytest.raises(ValueError, match="only with the removal gate's permit"):
                build_action_pod(step, one, BUNDLE, "ns", "sa", permit=permit)  # type: ignore[arg-type]
    build_helper_pod(step, one, BUNDLE, "ns", "sa", permit=permit_for(one))  # type: ignore[arg-type]


def test_a_batch_volume_without_its_permit_fails_alone() -> None:
    targets = [teardown(1), teardown(2), teardown(3)]
    permits = permits_for(targets[:2])
    with pytest.raises(VolumePartError) as raised:
        build_batch_helper_pod("delete", targets, BUNDLE, "ns", "sa", permits=permits)
    assert raised.value.volume_name == "pvc-3"


def test_an_orphan_is_removed_only_with_the_permit_for_that_orphan() -> None:
    def orphan_permit(path: str) -> object:
        return decide_removal(
            RemovalProof(RemovalKind.ORPHAN_REMOVAL, "", path, "/data", (), holds_lease=True)
        )

    arguments = {"node": "n1", "base_path": "/data", "path": "/data/old", "min_age_seconds": 60}
    for wrong in (orphan_permit("/data/other"), permit_for(teardown(1))):
        with pytest.raises(ValueError, match="needs the removal gate's permit"):
            build_orphan_removal_pod(BUNDLE, "ns", "sa", permit=wrong, **arguments)  # type: ignore[arg-type]
    build_orphan_removal_pod(BUNDLE, "ns", "sa", permit=orphan_permit("/data/old"), **arguments)  # type: ignore[arg-type]
