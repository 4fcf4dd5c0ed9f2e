"""ConfigMapFiles cannot be built with files the provisioner would refuse: a program that makes
one directly (not through the stack's settings) gets the runtime loader's message at once,
instead of a ConfigMap the running pod rejects."""

from __future__ import annotations

import json

import pytest

from components.args import ConfigMapFiles
from provisioner.configuration.config import (
    DEFAULT_HELPER_POD_YAML,
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
    MAX_SCRIPT_BYTES,
)

DEFAULT_NODE = "DEFAULT_PATH_FOR_NON_LISTED_NODES"


def files(paths: list[str], helper_pod_yaml: str = DEFAULT_HELPER_POD_YAML) -> ConfigMapFiles:
    config = {"nodePathMap": [{"node": DEFAULT_NODE, "paths": paths}]}
    return ConfigMapFiles(
        json.dumps(config), DEFAULT_SETUP_SCRIPT, DEFAULT_TEARDOWN_SCRIPT, helper_pod_yaml
    )


def test_valid_files_are_kept_as_given() -> None:
    built = files(["/data"])
    assert json.loads(built.to_data()["config.json"])["nodePathMap"][0]["paths"] == ["/data"]


def test_a_relative_base_path_is_refused() -> None:
    with pytest.raises(
        ValueError, match=r'nodePathMap\[0\]\.paths\[0\]: "data" must be an absolute'
    ):
        files(["data"])


def test_an_empty_setup_script_without_a_command_is_refused() -> None:
    config = json.dumps({"nodePathMap": [{"node": DEFAULT_NODE, "paths": ["/data"]}]})
    with pytest.raises(ValueError, match="the setup script is empty"):
        ConfigMapFiles(config, "", DEFAULT_TEARDOWN_SCRIPT, DEFAULT_HELPER_POD_YAML)


def test_a_script_larger_than_a_helper_pod_carries_is_refused() -> None:
    """A program may pass a script read from a file (a stack config value that large never
    reaches the program: the engine passes its config in one environment string too)."""
    config = json.dumps({"nodePathMap": [{"node": DEFAULT_NODE, "paths": ["/data"]}]})
    large = "#" * (MAX_SCRIPT_BYTES + 1)
    with pytest.raises(ValueError, match=f"teardown script is {MAX_SCRIPT_BYTES + 1} bytes, over"):
        ConfigMapFiles(config, DEFAULT_SETUP_SCRIPT, large, DEFAULT_HELPER_POD_YAML)


def test_a_helper_template_with_host_access_needs_the_explicit_allowance() -> None:
    privileged = DEFAULT_HELPER_POD_YAML.replace("spec:", "spec:\n  hostNetwork: true", 1)
    with pytest.raises(ValueError, match="hostNetwork"):
        files(["/data"], privileged)
    config = json.dumps({"nodePathMap": [{"node": DEFAULT_NODE, "paths": ["/data"]}]})
    allowed = ConfigMapFiles(
        config,
        DEFAULT_SETUP_SCRIPT,
        DEFAULT_TEARDOWN_SCRIPT,
        privileged,
        allow_unsafe_helper_template=True,
    )
    assert "hostNetwork: true" in allowed.to_data()["helperPod.yaml"]
