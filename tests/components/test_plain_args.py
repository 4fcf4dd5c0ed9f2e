"""The components' own args refuse Outputs at once, naming the field, instead of writing
"Calling __str__ on an Output[T] is not supported" into object names at `up`."""

from __future__ import annotations

import json
from dataclasses import replace

import pulumi

from components.args import (
    ConfigMapFiles,
    ProvisionerDeploymentArgs,
    StorageClassArgs,
    StorageClassesArgs,
)
from components.deployment import ProvisionerDeployment
from components.storage_classes import StorageClasses
from provisioner.configuration.config import (
    DEFAULT_HELPER_POD_YAML,
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
)
from tests.components.mocked_engine import run_mocked

FILES = ConfigMapFiles(
    json.dumps({"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": ["/d"]}]}),
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
    DEFAULT_HELPER_POD_YAML,
)


def test_an_output_namespace_is_refused_naming_the_field() -> None:
    def program() -> None:
        namespace = pulumi.Output.from_input("team")
        ProvisionerDeployment("lps", ProvisionerDeploymentArgs(FILES, namespace=namespace))  # type: ignore[arg-type]

    run = run_mocked({}, program)
    assert isinstance(run.error, TypeError), run.error
    assert str(run.error).startswith("ProvisionerDeploymentArgs.namespace: an Output")
    assert "LocalPathStorage" in str(run.error)
    assert run.registrations == []


def test_an_output_nested_in_a_class_is_refused() -> None:
    def program() -> None:
        storage_class = StorageClassArgs("fast")
        labels = {"team": pulumi.Output.from_input("a")}
        StorageClasses(
            "lps",
            StorageClassesArgs((replace(storage_class, annotations=labels),)),  # type: ignore[arg-type]
        )

    run = run_mocked({}, program)
    assert isinstance(run.error, TypeError), run.error
    assert "StorageClassesArgs.classes[0].annotations['team']" in str(run.error)


def test_plain_args_build_as_before() -> None:
    def program() -> None:
        ProvisionerDeployment("lps", ProvisionerDeploymentArgs(FILES, namespace="team"))

    run = run_mocked({}, program)
    assert run.error is None
    assert run.one("kubernetes:core/v1:Namespace").inputs["metadata"]["name"] == "team"
