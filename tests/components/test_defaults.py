"""Each default is written once (components/args.py, provisioner/configuration/defaults.py); the
places that must spell it out for users (the package schema's descriptions, the runtime's flags) say
the same, so they cannot drift. Pulumi.yaml's are held equal in test_project_file.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

from components.args import ProvisionerDeploymentArgs
from components.naming import CONFIG_MAP_NAME, DEFAULT_PROVISIONER_NAME, HELPER_SERVICE_ACCOUNT
from components.settings import SCALAR_DEFAULTS, parse_settings
from provisioner.configuration.options import parse_options
from tests.components.test_settings import dev_with

SCHEMA = Path(__file__).parents[2] / "docs" / "pulumi-package-schema.json"
_STATED_DEFAULT = re.compile(r"\(default\s+([^)]+)\)")


def _shown(value: str | int | bool) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def test_the_package_schema_states_the_stack_defaults() -> None:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    [component] = schema["resources"].values()
    stated = {
        key: match.group(1)
        for key, spec in component["inputProperties"].items()
        if (match := _STATED_DEFAULT.search(spec.get("description", "")))
    }
    assert "workers" in stated
    for key, default in stated.items():
        assert default == _shown(SCALAR_DEFAULTS[key]), key


def test_the_runtime_flags_default_to_what_the_stack_deploys() -> None:
    """A provisioner started without flags behaves as the stack's Deployment tells it to."""
    options = parse_options([], {})
    deployed = parse_settings(dev_with()).deployment
    assert options.workers == deployed.workers == ProvisionerDeploymentArgs.workers
    assert options.provisioning_retry_count == deployed.provisioning_retry_count
    assert options.deletion_retry_count == deployed.deletion_retry_count
    assert options.metrics_port == deployed.metrics_port
    assert options.leader_election is deployed.leader_election
    assert options.provisioner_name == deployed.provisioner_name == DEFAULT_PROVISIONER_NAME
    assert options.configmap_name == deployed.config_map_name == CONFIG_MAP_NAME
    assert options.helper_service_account == HELPER_SERVICE_ACCOUNT
    assert (
        deployed.config_files.bundle.config.cmd_timeout_seconds
        == SCALAR_DEFAULTS["cmdTimeoutSeconds"]
    )
