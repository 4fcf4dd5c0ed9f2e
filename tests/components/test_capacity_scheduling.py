"""capacityAwareScheduling: the CSIDriver the kube-scheduler needs to read our published
capacities, deployed only when it can help and never when it would starve scheduling.

Tests marked "object form" feed `{"path": ..., "capacity": ...}` through the runtime's config
model (provisioner/configuration/config.py), which accepts it once the capacity model change is
merged.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from components import naming
from components.args import ConfigMapFiles, ProvisionerDeploymentArgs
from components.capacity_scheduling import csi_driver_name_problem
from components.deployment import ProvisionerDeployment
from components.naming import CONFIG_NAMESPACE
from components.program import run
from components.settings import parse_settings
from components.stack_values import SettingsError
from provisioner.configuration.config import (
    DEFAULT_HELPER_POD_YAML,
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
    parse_config_json,
)
from tests.components.mocked_engine import run_mocked
from tests.components.stack_files import engine_config, stack_file

CSI_DRIVER = "kubernetes:storage.k8s.io/v1:CSIDriver"
DEPLOYMENT = "local-path-storage:index:ProvisionerDeployment"
DEFAULT_NODE = "DEFAULT_PATH_FOR_NON_LISTED_NODES"
SLASH_FREE_NAME = "local-path-storage.io"
BUDGETED_PATHS = [{"node": DEFAULT_NODE, "paths": [{"path": "/data", "capacity": "100Gi"}]}]
EXPECTED_SPEC = {
    "storageCapacity": True,
    "attachRequired": False,
    "podInfoOnMount": False,
    "volumeLifecycleModes": ["Persistent"],
}


def dev_with(**overrides: Any) -> dict[str, str]:
    config = dict(stack_file("dev")["config"])
    for key, value in overrides.items():
        config[f"{CONFIG_NAMESPACE}:{key}"] = value
    return engine_config(config)


# -- pure decisions ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        ({"nodePathMap": [{"node": "n", "paths": ["/data"]}]}, False),
        ({"sharedFileSystemPath": "/mnt/nfs"}, False),
        ({"nodePathMap": [{"node": "n", "paths": ["/a", {"path": "/b"}]}]}, False),
        ({"nodePathMap": BUDGETED_PATHS}, True),
        ({"NodePathMap": [{"Node": "n", "Paths": [{"Path": "/b", "Capacity": "1Gi"}]}]}, True),
        (
            {
                "storageClassConfigs": {
                    "a": {"sharedFileSystemPath": "/mnt/nfs"},
                    "b": {
                        "nodePathMap": [{"node": "n", "paths": [{"path": "/b", "capacity": "1"}]}]
                    },
                }
            },
            True,
        ),
    ],
)
def test_declared_capacity_is_found_anywhere_in_config_json(
    document: dict[str, Any], expected: bool
) -> None:
    # The program asks the runtime's own model (components/settings.py).
    assert parse_config_json(json.dumps(document)).declares_capacity() is expected


@pytest.mark.parametrize(
    "name", ["local-path-storage.io", "e2e-abc.local-path-storage.io", "Example.COM", "a" * 63]
)
def test_names_a_csi_driver_can_take(name: str) -> None:
    assert csi_driver_name_problem(name) is None


@pytest.mark.parametrize(
    "name", [naming.DEFAULT_PROVISIONER_NAME, "rancher.io/local-path", "a" * 64, "under_score"]
)
def test_names_a_csi_driver_cannot_take(name: str) -> None:
    problem = csi_driver_name_problem(name)
    assert problem is not None
    assert json.dumps(name) in problem
    assert "capacityAwareScheduling" in problem


# -- stack config ------------------------------------------------------------------------------


def test_no_csi_driver_without_a_declared_capacity() -> None:
    """The provisioner publishes capacities only for budgeted paths; a CSIDriver without any
    would make the scheduler treat every node as full."""
    settings = parse_settings(dev_with(provisionerName=SLASH_FREE_NAME))
    assert settings.deployment.deploy_csi_driver is False
    assert settings.warnings == ()


@pytest.mark.parametrize("value", ["maybe", "yes", "1", ""])
def test_an_invalid_value_is_refused_naming_the_key(value: str) -> None:
    with pytest.raises(SettingsError) as caught:
        parse_settings(dev_with(capacityAwareScheduling=value))
    assert caught.value.key_path == "capacityAwareScheduling"
    assert str(caught.value) == (
        f"stack config local-path-storage:capacityAwareScheduling: must be true or false, "
        f"got {json.dumps(value)}"
    )


def test_the_object_form_deploys_the_csi_driver_by_default() -> None:
    """Object form."""
    settings = parse_settings(dev_with(provisionerName=SLASH_FREE_NAME, nodePathMap=BUDGETED_PATHS))
    assert settings.deployment.deploy_csi_driver is True
    assert settings.warnings == ()


def test_the_object_form_without_capacity_aware_scheduling_deploys_none() -> None:
    """Object form."""
    settings = parse_settings(
        dev_with(
            provisionerName=SLASH_FREE_NAME,
            nodePathMap=BUDGETED_PATHS,
            capacityAwareScheduling="false",
        )
    )
    assert settings.deployment.deploy_csi_driver is False
    assert settings.warnings == ()


def test_a_provisioner_name_no_csi_driver_can_take_is_a_warning_not_a_failure() -> None:
    """Object form. The budgets still hold in the provisioner; only the scheduler's view is
    lost, so preview says so and the stack deploys."""
    settings = parse_settings(dev_with(nodePathMap=BUDGETED_PATHS))
    assert settings.deployment.deploy_csi_driver is False
    (warning,) = settings.warnings
    assert warning.startswith(
        'stack config local-path-storage:provisionerName: "local-path-storage.io/local-path" '
        "cannot name the CSIDriver"
    )
    assert "\n" not in warning


# -- the component -------------------------------------------------------------------------------


def build_deployment(deploy_csi_driver: bool, provisioner_name: str = SLASH_FREE_NAME) -> None:
    files = ConfigMapFiles(
        config_json=json.dumps({"nodePathMap": [{"node": DEFAULT_NODE, "paths": ["/data"]}]}),
        setup=DEFAULT_SETUP_SCRIPT,
        teardown=DEFAULT_TEARDOWN_SCRIPT,
        helper_pod_yaml=DEFAULT_HELPER_POD_YAML,
    )
    args = ProvisionerDeploymentArgs(
        config_files=files,
        provisioner_name=provisioner_name,
        deploy_csi_driver=deploy_csi_driver,
    )
    ProvisionerDeployment("local-path-storage", args)


def test_the_component_registers_the_csi_driver_named_after_the_provisioner() -> None:
    result = run_mocked({}, lambda: build_deployment(True))
    assert result.error is None, result.error
    driver = result.one(CSI_DRIVER)
    assert driver.name == "local-path-storage-csidriver"
    assert (driver.parent_type, driver.parent_name) == (DEPLOYMENT, "local-path-storage")
    assert driver.inputs["metadata"]["name"] == SLASH_FREE_NAME
    assert "namespace" not in driver.inputs["metadata"]
    assert driver.inputs["metadata"]["labels"]["app.kubernetes.io/component"] == "scheduling"
    assert driver.inputs["spec"] == EXPECTED_SPEC


def test_the_component_registers_no_csi_driver_when_not_asked() -> None:
    result = run_mocked({}, lambda: build_deployment(False))
    assert result.error is None, result.error
    assert result.of_type(CSI_DRIVER) == []


def test_the_program_deploys_the_csi_driver_for_budgeted_paths() -> None:
    """Object form."""
    raw = dev_with(provisionerName=SLASH_FREE_NAME, nodePathMap=BUDGETED_PATHS)
    result = run_mocked(raw, run, stack="dev")
    assert result.error is None, result.error
    assert result.one(CSI_DRIVER).inputs["metadata"]["name"] == SLASH_FREE_NAME
    assert result.one(CSI_DRIVER).inputs["spec"] == EXPECTED_SPEC
    config = json.loads(result.one("kubernetes:core/v1:ConfigMap").inputs["data"]["config.json"])
    assert config["nodePathMap"][0]["paths"] == [{"path": "/data", "capacity": "100Gi"}]


def test_the_shipped_dev_stack_has_no_csi_driver() -> None:
    result = run_mocked(dev_with(), run, stack="dev")
    assert result.error is None, result.error
    assert result.of_type(CSI_DRIVER) == []
