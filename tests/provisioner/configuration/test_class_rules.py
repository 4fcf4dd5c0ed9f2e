"""A class and its config entry read once into ClassRules, and read again only when either is
replaced."""

import json

import msgspec

from provisioner.configuration.class_rules import ClassRulesCache, read_class_rules
from provisioner.configuration.config import DEFAULT_NODE, parse_config_json
from provisioner.objects.records import StorageClassRecord

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
