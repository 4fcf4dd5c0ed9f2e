"""storageClasses[].snapshotClass: a csi class's VolumeSnapshotClass (the node plugin's driver,
no parameters, the default annotation when asked), read at preview after the CRD; each bad
value refused with one line naming its key; and no snapshot class without the key."""

from __future__ import annotations

import json
from typing import Any

import pytest

from components.package_args import stack_config_values
from components.program import run
from components.settings import parse_settings
from components.snapshot_classes import CRD_NAME, DEFAULT_CLASS_ANNOTATION
from components.stack_values import SettingsError
from provisioner.objects.snapshot_handoff import (
    BEING_CREATED_ANNOTATION,
    SNAPSHOT_REMOVAL_PERMIT_ANNOTATION,
    SNAPSHOT_REMOVED_ANNOTATION,
    SNAPSHOT_SETUP_ANNOTATION,
)
from tests.components.mocked_engine import Run, run_mocked
from tests.components.test_csi_stack import CLUSTER_ROLE, CSI_DRIVER, DRIVER, VAP, dev_with

SNAPSHOT_CLASS = "kubernetes:snapshot.storage.k8s.io/v1:VolumeSnapshotClass"
CRD = "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition"


def csi(name: str = "local-csi", **keys: Any) -> dict[str, Any]:
    return {"name": name, "volumeType": "csi", **keys}


def stack_run(classes: list[dict[str, Any]], **overrides: Any) -> Run:
    result = run_mocked(dev_with(storageClasses=classes, **overrides), run, stack="dev")
    assert result.error is None, result.error
    return result


def snapshot_classes(result: Run) -> dict[str, dict[str, Any]]:
    return {r.inputs["metadata"]["name"]: r.inputs for r in result.of_type(SNAPSHOT_CLASS)}


def refusal(classes: list[dict[str, Any]]) -> SettingsError:
    with pytest.raises(SettingsError) as caught:
        parse_settings(dev_with(storageClasses=classes))
    assert "\n" not in str(caught.value)
    return caught.value


# -- the resource graph ------------------------------------------------------------------------


def test_without_the_key_no_snapshot_class_and_no_crd_read() -> None:
    result = stack_run([csi(), {"name": "local-path-storage"}])
    assert result.of_type(SNAPSHOT_CLASS) == []
    assert result.reads == []


def test_a_snapshot_class_names_the_driver_with_no_parameters() -> None:
    result = stack_run([csi(snapshotClass={})])
    classes = snapshot_classes(result)
    assert list(classes) == ["local-csi"]  # the StorageClass's name unless given
    body = classes["local-csi"]
    assert body["apiVersion"] == "snapshot.storage.k8s.io/v1"
    assert body["kind"] == "VolumeSnapshotClass"
    assert body["driver"] == DRIVER
    assert body["deletionPolicy"] == "Delete"
    assert "parameters" not in body
    assert DEFAULT_CLASS_ANNOTATION not in body["metadata"]["annotations"]
    assert body["metadata"]["labels"]["app.kubernetes.io/component"] == "snapshotclass"


def test_name_policy_and_default_as_given() -> None:
    result = stack_run(
        [
            csi("fast", snapshotClass={"name": "fast-snaps", "deletionPolicy": "Retain"}),
            csi("slow", snapshotClass={"default": True}),
        ]
    )
    classes = snapshot_classes(result)
    assert classes["fast-snaps"]["deletionPolicy"] == "Retain"
    assert DEFAULT_CLASS_ANNOTATION not in classes["fast-snaps"]["metadata"]["annotations"]
    assert classes["slow"]["metadata"]["annotations"][DEFAULT_CLASS_ANNOTATION] == "true"
    assert {body["driver"] for body in classes.values()} == {DRIVER}


def test_the_crd_is_read_first_unless_rendering() -> None:
    applying = stack_run([csi(snapshotClass={}), csi("b", snapshotClass={})])
    assert applying.reads == [(CRD, "local-path-storage-volumesnapshotclass-crd", CRD_NAME)]
    read_urn_suffix = "local-path-storage-volumesnapshotclass-crd"
    for registration in applying.of_type(SNAPSHOT_CLASS):
        assert any(urn.endswith(read_urn_suffix) for urn in registration.dependencies)
    rendering = stack_run([csi(snapshotClass={})], renderYamlToDirectory="out")
    assert rendering.reads == []
    assert len(rendering.of_type(SNAPSHOT_CLASS)) == 1


def test_the_driver_is_the_deployed_csi_drivers_for_any_provisioner_name() -> None:
    result = stack_run([csi(snapshotClass={})], provisionerName="example.com/disks")
    (body,) = snapshot_classes(result).values()
    assert body["driver"] == result.one(CSI_DRIVER).inputs["metadata"]["name"]
    assert body["driver"] != DRIVER


# -- validation at preview ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "key", "says"),
    [
        ("yes", "storageClasses[0].snapshotClass", "must be an object"),
        ({"policy": "Delete"}, "storageClasses[0].snapshotClass.policy", "deletionPolicy"),
        (
            {"deletionPolicy": "Keep"},
            "storageClasses[0].snapshotClass.deletionPolicy",
            "must be Delete (deleting a VolumeSnapshot removes its data) or Retain (the data"
            ' stays), got "Keep"',
        ),
        ({"default": "sometimes"}, "storageClasses[0].snapshotClass.default", "true or false"),
        ({"name": "Not_A_Name"}, "storageClasses[0].snapshotClass.name", "not a valid"),
        ({"name": 3}, "storageClasses[0].snapshotClass.name", "must be a string"),
    ],
)
def test_bad_values_name_their_key(value: object, key: str, says: str) -> None:
    error = refusal([csi(snapshotClass=value)])
    assert error.key_path == key
    assert says in error.message


def test_only_a_csi_class_takes_a_snapshot_class() -> None:
    error = refusal([{"name": "local-path-storage", "snapshotClass": {}}])
    assert str(error) == (
        "stack config local-path-storage:storageClasses[0].snapshotClass: only a csi class's"
        " volumes can be snapshotted (the node plugin takes the snapshots): add volumeType: csi"
        " to the class, or drop snapshotClass"
    )


def test_at_most_one_default_per_driver() -> None:
    error = refusal(
        [
            csi("a", snapshotClass={"default": True}),
            csi("b", snapshotClass={}),
            csi("c", snapshotClass={"default": "true"}),
        ]
    )
    assert error.key_path == "storageClasses[2].snapshotClass.default"
    assert 'storageClasses[0] ("a") already is' in error.message


def test_two_classes_cannot_share_a_snapshot_class_name() -> None:
    error = refusal([csi("a", snapshotClass={"name": "b"}), csi("b", snapshotClass={})])
    assert error.key_path == "storageClasses[1].snapshotClass.name"
    assert '"b" is already the snapshot class of storageClasses[0] ("a")' in error.message


def test_null_is_no_snapshot_class() -> None:
    settings = parse_settings(dev_with(storageClasses=[csi(snapshotClass=None)]))
    (storage_class,) = settings.storage_classes.classes
    assert storage_class.snapshot_class is None


# -- the node plugin's rights over contents (with any csi class) -------------------------------


def test_the_admission_policy_covers_contents_and_their_status() -> None:
    without_snapshot_class = stack_run([csi()])
    spec = without_snapshot_class.one(VAP).inputs["spec"]
    rules = spec["matchConstraints"]["resourceRules"]
    assert rules[1] == {
        "apiGroups": ["snapshot.storage.k8s.io"],
        "apiVersions": ["v1"],
        "operations": ["UPDATE"],
        "resources": ["volumesnapshotcontents", "volumesnapshotcontents/status"],
    }
    (content_rule,) = [v for v in spec["validations"] if "variables.content" in v["expression"]]
    for annotation in (BEING_CREATED_ANNOTATION, SNAPSHOT_REMOVED_ANNOTATION):
        assert f"'{annotation}'" in content_rule["expression"]
    for annotation in (SNAPSHOT_SETUP_ANNOTATION, SNAPSHOT_REMOVAL_PERMIT_ANNOTATION):
        assert annotation not in content_rule["expression"]


def test_no_csi_class_no_snapshot_rights() -> None:
    result = stack_run([{"name": "local-path-storage"}])
    assert result.of_type(VAP) == []
    for role in result.of_type(CLUSTER_ROLE):
        assert "volumesnapshotcontents" not in json.dumps(role.inputs["rules"])


def test_the_package_arg_becomes_the_stack_key() -> None:
    values = stack_config_values(
        {
            "storage_classes": [
                {
                    "name": "local-csi",
                    "volume_type": "csi",
                    "snapshot_class": {"deletion_policy": "Retain", "default": True},
                }
            ]
        }
    )
    (entry,) = json.loads(values["local-path-storage:storageClasses"])
    assert entry["snapshotClass"] == {"deletionPolicy": "Retain", "default": True}
