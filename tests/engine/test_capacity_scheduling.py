"""capacityAwareScheduling through the real engine: a stack whose paths declare a capacity
gets the CSIDriver the kube-scheduler reads (named after the provisioner, so the provisioner
name here is one a CSIDriver can take), removed again by destroy; turned off, there is none;
a value that is not a boolean fails preview with one line naming the key.

The stacks with `{"path": ..., "capacity": ...}` need the runtime config model that accepts
the object form (provisioner/configuration/config.py, the capacity model change).
"""

from __future__ import annotations

from typing import Any

from localcluster import LocalCluster
from tests.engine.support import (
    READER,
    StackFactory,
    StackNames,
    api_get,
    base_config,
)
from tests.engine.test_stack_changes import expected_creates, stack_resource_name

CSI_DRIVER = ("kubernetes:storage.k8s.io/v1:CSIDriver", "local-path-storage-csidriver")


def budgeted_names() -> StackNames:
    fresh = StackNames.fresh()
    return StackNames(
        suffix=fresh.suffix,
        namespace=fresh.namespace,
        provisioner_name=f"e2e-{fresh.suffix}.local-path-storage.io",
        class_name=fresh.class_name,
    )


def budgeted_config(names: StackNames, **extra: Any) -> dict[str, Any]:
    config = base_config(names)
    config["nodePathMap"] = [
        {
            "node": "DEFAULT_PATH_FOR_NON_LISTED_NODES",
            "paths": [{"path": "/opt/local-path-provisioner", "capacity": "10Gi"}],
        }
    ]
    return {**config, **extra}


def csi_driver(cluster: LocalCluster, name: str) -> dict[str, Any] | None:
    return api_get(cluster, f"/apis/storage.k8s.io/v1/csidrivers/{name}")


def test_budgeted_paths_get_the_csi_driver_and_destroy_removes_it(
    stacks: StackFactory, cluster: LocalCluster
) -> None:
    names = budgeted_names()
    stack = stacks.create(budgeted_config(names), names)
    expected = sorted(
        [
            *(
                (kind, stack_resource_name(stack) if kind == "pulumi:pulumi:Stack" else name)
                for kind, name in expected_creates(names.class_name)
            ),
            CSI_DRIVER,
        ]
    )
    preview = stack.preview()
    assert preview.of("create") == sorted([*expected, READER]), preview.output
    assert "warning:" not in preview.output, preview.output

    up = stack.up()
    assert up.of("create") == expected
    driver = csi_driver(cluster, names.provisioner_name)
    assert driver is not None
    assert driver["spec"]["storageCapacity"] is True
    assert driver["spec"]["attachRequired"] is False
    assert driver["spec"]["podInfoOnMount"] is False
    assert driver["spec"]["volumeLifecycleModes"] == ["Persistent"]
    stack.preview(expect_no_changes=True)

    destroyed = stack.destroy()
    # The stack, its 2 components, 11 objects and the kubernetes provider.
    assert destroyed.ops() == {"delete": 15}
    assert csi_driver(cluster, names.provisioner_name) is None


def test_capacity_aware_scheduling_false_deploys_no_csi_driver(stacks: StackFactory) -> None:
    names = budgeted_names()
    stack = stacks.create(budgeted_config(names, capacityAwareScheduling=False), names)
    preview = stack.preview()
    assert CSI_DRIVER not in preview.of("create"), preview.output
    assert len(preview.of("create")) == len(expected_creates(names.class_name)) + 1


def test_a_value_that_is_not_a_boolean_fails_preview_with_one_line(stacks: StackFactory) -> None:
    stack = stacks.create()
    stack.set_config("capacityAwareScheduling", "maybe")
    output = stack.failed_preview()
    # Pulumi.yaml declares the key a boolean, so the engine itself refuses the value before
    # the program runs (the program's own check, for a value that reaches it, is unit-tested).
    errors = [line.strip() for line in output.splitlines() if "error: " in line]
    assert len(errors) == 1, output
    assert "configuration key 'capacityAwareScheduling' must be of type 'boolean'" in errors[0]
