"""A class and its config entry read once into ClassRules, and read again only when either is
replaced."""

import json

import msgspec
import pytest

from provisioner.configuration.class_rules import ClassRulesCache, read_class_rules
from provisioner.configuration.config import DEFAULT_NODE, parse_config_json
from provisioner.objects.records import ClaimRecord, NodeRecord, StorageClassRecord

ME = "local-path-storage.io/local-path"
CONFIG = parse_config_json(
    json.dumps(
        {
            "storageClassConfigs": {
                "local": {
                    "nodePathMap": [
                        {"node": DEFAULT_NODE, "paths": ["/opt/lp"]},
                        {"node": "n2", "paths": [{"path": "/data", "capacity": "1Gi"}]},
                    ]
                },
                "nfs": {"sharedFileSystemPath": "/mnt/nfs"},
            }
        }
    )
)
LOCAL = StorageClassRecord(
    "local",
    ME,
    parameters={"minSize": "1Mi", "nodeLossGracePeriod": "10m", "reuseExistingData": "true"},
    annotations={"defaultVolumeType": "local"},
)


def test_every_rule_is_read_from_the_class_and_its_entry() -> None:
    rules = read_class_rules("local", LOCAL, CONFIG)
    assert rules.configured and rules.problem is None
    assert (rules.min_size, rules.max_size) == (1024**2, None)
    assert rules.node_loss_grace_seconds == 600
    assert rules.reuse_existing_data
    assert rules.default_volume_type == "local"
    assert rules.base_paths_on("n1") == ["/opt/lp"]
    assert rules.capacities_on("n2") == {"/data": 1024**3}
    shared = read_class_rules("nfs", StorageClassRecord("nfs", ME), CONFIG)
    assert shared.base_paths_on("any") == ["/mnt/nfs"] and shared.capacities_on("any") == {}


def test_a_class_that_cannot_provision_says_why_and_keeps_its_node_loss() -> None:
    broken = msgspec.structs.replace(
        LOCAL, parameters={"nodeLossGracePeriod": "10m", "pathPattern": "{{ .Nope }}"}
    )
    rules = read_class_rules("local", broken, CONFIG)
    assert rules.problem is not None and rules.problem.startswith("parameters.pathPattern: ")
    assert rules.node_loss_grace_seconds == 600, "a class's other rules still hold its volumes"
    unconfigured = read_class_rules("other", msgspec.structs.replace(LOCAL, name="other"), CONFIG)
    assert not unconfigured.configured and unconfigured.min_size == 1024**2


def test_a_class_is_read_once_per_version_of_it_and_of_the_config() -> None:
    cache = ClassRulesCache()
    first = cache.rules("local", LOCAL, CONFIG)
    assert cache.rules("local", LOCAL, CONFIG) is first
    changed = msgspec.structs.replace(LOCAL, parameters={"maxSize": "1Gi"})
    assert cache.rules("local", changed, CONFIG).max_size == 1024**3
    reloaded = parse_config_json(CONFIG.to_config_json())
    again = cache.rules("local", changed, reloaded)
    assert again is cache.rules("local", changed, reloaded)
    assert again is not cache.rules("local", changed, CONFIG)


def test_a_csi_class_s_type_is_its_parameter_and_a_claim_cannot_change_it() -> None:
    csi = StorageClassRecord("local", ME, parameters={"volumeType": "csi"})
    rules = read_class_rules("local", csi, CONFIG)
    assert rules.problem is None and rules.default_volume_type == "csi"
    claim = ClaimRecord(uid="u", namespace="ns", name="c", annotations={"volumeType": "local"})
    node = NodeRecord("n1", {"kubernetes.io/hostname": "n1"})
    with pytest.raises(ValueError, match="StorageClass local gives CSI volumes"):
        rules.place(claim, node)
    same = msgspec.structs.replace(claim, annotations={"volumeType": "csi"})
    assert rules.place(same, node).volume_type == "csi"


@pytest.mark.parametrize(
    ("name", "parameters", "annotations", "problem"),
    [
        (
            "local",
            {"volumeType": "hostPath"},
            {},
            "parameters.volumeType: \"hostPath\" is not a volume type parameter: only 'csi' is"
            " one (hostPath and local are the defaultVolumeType annotation's)",
        ),
        (
            "nfs",
            {"volumeType": "csi"},
            {},
            'parameters.volumeType: class "nfs" serves a sharedFileSystemPath, which a node'
            " plugin does not serve: drop volumeType csi, or give the class a nodePathMap",
        ),
        (
            "local",
            {"volumeType": "csi"},
            {"defaultVolumeType": "local"},
            'annotations.defaultVolumeType: class "local" is a csi class, whose volumes are'
            " always CSI: drop the defaultVolumeType annotation",
        ),
    ],
)
def test_a_csi_class_that_cannot_be_says_why_in_one_line(
    name: str, parameters: dict[str, str], annotations: dict[str, str], problem: str
) -> None:
    storage_class = StorageClassRecord(name, ME, parameters=parameters, annotations=annotations)
    assert read_class_rules(name, storage_class, CONFIG).problem == problem
