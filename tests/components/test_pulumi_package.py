"""The Pulumi package's LocalPathStorage: its inferred schema (offline, with the SDK's own
provider host) and the component under the SDK's mock engine, with an Output as an arg."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as kubernetes
from pulumi.provider.experimental.component import ComponentProvider

from components import naming
from components.package_args import stack_config_values
from components.pulumi_package import PACKAGE_VERSION, LocalPathStorage
from components.settings import KNOWN_KEYS
from tests.components.mocked_engine import run_mocked

ROOT = Path(__file__).resolve().parents[2]
ENGINE_SCHEMA = ROOT / "docs" / "pulumi-package-schema.json"
"""`pulumi package get-schema ./pulumi-package`, as the engine printed it."""
TYPE_TOKEN = "local-path-storage:index:LocalPathStorage"
PATHS = [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": ["/opt/local-path-provisioner"]}]


def inferred_schema() -> dict[str, Any]:
    """The schema the provider host serves, inferred in-process as the plugin does."""
    provider = ComponentProvider([LocalPathStorage], naming.CONFIG_NAMESPACE, None, PACKAGE_VERSION)
    assert provider.schema is not None
    schema: dict[str, Any] = json.loads(provider.schema)
    return schema


def all_properties(schema: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every property of the component (inputs and outputs) and of its types, by path."""
    resource = schema["resources"][TYPE_TOKEN]
    found = [(f"inputs.{name}", spec) for name, spec in resource["inputProperties"].items()]
    found += [(f"outputs.{name}", spec) for name, spec in resource["properties"].items()]
    for type_name, type_spec in schema["types"].items():
        found += [(f"{type_name}.{name}", spec) for name, spec in type_spec["properties"].items()]
    return found


def test_every_stack_key_is_an_arg_but_the_render_directory() -> None:
    inputs = inferred_schema()["resources"][TYPE_TOKEN]["inputProperties"]
    assert set(inputs) == KNOWN_KEYS - {"renderYamlToDirectory"}


def test_every_arg_and_property_is_typed_and_described() -> None:
    for path, spec in all_properties(inferred_schema()):
        assert "type" in spec or "$ref" in spec, path
        assert spec.get("description", "").strip(), path


def test_args_take_outputs() -> None:
    """No property is `plain`: every SDK accepts another resource's output for any arg."""
    for path, spec in all_properties(inferred_schema()):
        assert "plain" not in spec, path


def without_engine_omissions(value: Any) -> Any:
    """The schema as the engine prints it: no descriptions on array items and map values, no
    empty lists or maps."""
    if isinstance(value, dict):
        kept = {}
        for key, item in value.items():
            normalised = without_engine_omissions(item)
            if key in ("items", "additionalProperties") and isinstance(normalised, dict):
                normalised = {k: v for k, v in normalised.items() if k != "description"}
            if normalised not in ([], {}, None):
                kept[key] = normalised
        return kept
    if isinstance(value, list):
        return [without_engine_omissions(item) for item in value]
    return value


def test_committed_engine_schema_is_what_the_code_infers() -> None:
    """docs/pulumi-package-schema.json is regenerated with `pulumi package get-schema
    ./pulumi-package` whenever an arg changes."""
    engine = json.loads(ENGINE_SCHEMA.read_text(encoding="utf-8"))
    assert without_engine_omissions(engine) == without_engine_omissions(inferred_schema())


def test_resolved_args_become_the_stack_config() -> None:
    values = stack_config_values(
        {
            "namespace": "storage",
            "replicas": 2,
            "create_namespace": False,
            "node_selector": {"node_role": "storage"},
            "storage_classes": [{"name": "local", "is_default": True}],
            "update_strategy": {"type": "RollingUpdate", "rolling_update": {"max_surge": 1}},
        }
    )
    assert values == {
        "local-path-storage:namespace": "storage",
        "local-path-storage:replicas": "2",
        "local-path-storage:createNamespace": "false",
        # A map's keys are the user's (label keys), never renamed.
        "local-path-storage:nodeSelector": '{"node_role": "storage"}',
        "local-path-storage:storageClasses": '[{"name": "local", "isDefault": true}]',
        "local-path-storage:updateStrategy": (
            '{"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}'
        ),
    }


NAMESPACE = "kubernetes:core/v1:Namespace"
KUBE_DEPLOYMENT = "kubernetes:apps/v1:Deployment"
STORAGE_CLASS = "kubernetes:storage.k8s.io/v1:StorageClass"


def consumer(args: dict[str, Any]) -> None:
    """A program that makes its own namespace and hands its name, an Output, to the component."""
    own = kubernetes.core.v1.Namespace("own", metadata={"name": "team-storage"})
    storage = LocalPathStorage(
        "storage",
        {"namespace": own.metadata.name, "create_namespace": False, **args},  # type: ignore[typeddict-item]
    )
    pulumi.export("namespace", storage.namespace)
    pulumi.export("classes", storage.storage_class_names)


def test_an_output_namespace_reaches_the_objects() -> None:
    """The issue's bug: an Output written into object names as "Calling __str__ on an
    Output[T] is not supported". Resolved first, it is the namespace of every object."""
    result = run_mocked(
        {},
        lambda: consumer({"node_path_map": PATHS, "storage_classes": [{"name": "local"}]}),
    )
    assert result.error is None
    assert result.outputs == {"namespace": "team-storage", "classes": ["local"]}
    deployment = result.one(KUBE_DEPLOYMENT)
    assert deployment.inputs["metadata"]["namespace"] == "team-storage"
    assert [r.name for r in result.of_type(NAMESPACE)] == ["own"]
    assert result.one(STORAGE_CLASS).inputs["metadata"]["name"] == "local"
    names = json.dumps([r.inputs for r in result.registrations])
    assert "Output[T]" not in names


def test_a_bad_arg_fails_with_the_stacks_message_naming_the_arg() -> None:
    paths = [*PATHS, {"node": "worker-1", "paths": ["data"]}]
    result = run_mocked(
        {}, lambda: consumer({"node_path_map": paths, "storage_classes": [{"name": "local"}]})
    )
    assert isinstance(result.error, pulumi.InputPropertyError)
    assert result.error.property_path == "nodePathMap[1].paths[0]"
    assert result.error.reason == '"data" must be an absolute path'
    assert result.of_type(KUBE_DEPLOYMENT) == []
