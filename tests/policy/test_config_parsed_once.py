"""The policy pack parses a ConfigMap's config.json once, for every policy that reads it."""

from __future__ import annotations

import json

import pytest

from policy import provisioner_config, storage_paths
from tests.config_validations import count_validations
from tests.policy.resources import config_map


def test_the_pack_validates_config_json_once(monkeypatch: pytest.MonkeyPatch) -> None:
    validations = count_validations(monkeypatch)
    # A config.json no other test uses, so no earlier parse of it is remembered.
    resource = config_map({"sharedFileSystemPath": "/var/lib/kubelet/parsed-once"})
    assert provisioner_config.check_resource(resource) == []
    [unsafe] = storage_paths.check_resource(resource)
    assert "lies in the system directory /var/lib/kubelet" in unsafe
    assert len(validations) == 1


def test_a_refused_config_json_is_reported_by_its_policy_each_time() -> None:
    """The parse is shared, not the verdict: the refusal reaches every check of it."""
    resource = config_map(json.dumps({"nodePathMap": [{"node": "n", "paths": ["data"]}]}))
    for _ in range(2):
        [message] = provisioner_config.check_resource(resource)
        assert 'nodePathMap[0].paths[0]: "data" must be an absolute path' in message
        assert storage_paths.check_resource(resource) == []
