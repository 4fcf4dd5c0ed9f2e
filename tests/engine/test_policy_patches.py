"""A Patch resource is held to the checks of the object it writes: a program that patches the
provisioner's ConfigMap with a config.json putting volumes under /var/lib/kubelet (a
server-side apply patch, as `kubectl apply --server-side` or another team's program would
send) fails its preview with the pack, the patch named; the same patch with a data directory
passes."""

from __future__ import annotations

import json
from pathlib import Path

from scripts.pulumi_engine import copy_entry_point
from tests.engine.support import StackFactory, StackNames, base_config
from tests.policy.engine import PINNED_HELPER, PolicyStack, violations
from tests.policy.support import policy_pack_copy

CONFIG_MAP_NAME = "local-path-config"
PROGRAM = '''"""The project's program, then a patch of its ConfigMap's config.json."""

import pulumi_kubernetes as kubernetes

from components.program import main

main()
kubernetes.core.v1.ConfigMapPatch("moved-volumes", metadata={metadata!r}, data={data!r})
'''


def write_program(project_dir: Path, namespace: str, base_path: str) -> None:
    config = {"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": [base_path]}]}
    metadata = {
        "name": CONFIG_MAP_NAME,
        "namespace": namespace,
        "annotations": {"pulumi.com/patchForce": "true"},
    }
    source = project_dir / "patching_program.py"
    source.write_text(
        PROGRAM.format(metadata=metadata, data={"config.json": json.dumps(config)}),
        encoding="utf-8",
    )
    copy_entry_point(source, project_dir / "__main__.py")


def test_a_config_map_patch_of_a_system_path_fails_preview(
    stacks: StackFactory, tmp_path: Path
) -> None:
    names = StackNames.fresh()
    stack = stacks.create({**base_config(names), **PINNED_HELPER}, names)
    policy_stack = PolicyStack(stack, policy_pack_copy(tmp_path / "policy"))

    write_program(stack.project_dir, names.namespace, "/var/lib/kubelet")
    passed, output = policy_stack.run({})
    assert not passed, output
    assert [name for level, name in violations(output) if level == "mandatory"] == [
        "safe-storage-paths"
    ]
    assert (
        f"ConfigMapPatch {CONFIG_MAP_NAME} config.json.nodePathMap[0].paths[0]: "
        '"/var/lib/kubelet" lies in the system directory /var/lib/kubelet'
    ) in output

    write_program(stack.project_dir, names.namespace, "/mnt/other-disk")
    passed, output = policy_stack.run({})
    assert passed, output
