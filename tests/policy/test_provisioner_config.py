"""The ConfigMap policy is the runtime's validation: same verdicts, same messages."""

from __future__ import annotations

import json

import pytest

from policy.provisioner_config import check_resource
from provisioner.configuration.config import MAX_SCRIPT_BYTES, ConfigError, parse_config_json
from tests.policy.resources import config_map

BAD = [
    {"nodePathMap": [{"node": "n", "paths": ["data"]}]},
    {"nodePathMap": [{"node": "n", "paths": ["/a//b"]}]},
    {"nodePathMaps": []},
    {"nodePathMap": [{"node": "n", "paths": ["/a", "/a/b"]}]},
    {"cmdTimeoutSeconds": 0, "sharedFileSystemPath": "/mnt/x"},
    "{not json",
]


@pytest.mark.parametrize("config", BAD, ids=range(len(BAD)))
def test_what_the_runtime_refuses_is_refused_with_its_message(config: object) -> None:
    text = config if isinstance(config, str) else json.dumps(config)
    with pytest.raises(ConfigError) as refused:
        parse_config_json(text)
    [message] = check_resource(config_map(text))
    assert message.startswith(f"ConfigMap local-path-config {refused.value}: ")
    assert "the provisioner would refuse this ConfigMap" in message


def test_a_valid_config_map_passes() -> None:
    assert check_resource(config_map()) == []


def test_an_empty_setup_script_without_a_command_is_refused() -> None:
    resource = config_map()
    data = dict(resource.props["data"])
    data["setup"] = ""
    resource = type(resource)(resource.type, {**resource.props, "data": data})
    [message] = check_resource(resource)
    assert "the setup script is empty" in message


def test_a_script_larger_than_a_helper_pod_carries_is_refused() -> None:
    resource = config_map()
    data = {**resource.props["data"], "teardown": "#" * (MAX_SCRIPT_BYTES + 1)}
    resource = type(resource)(resource.type, {**resource.props, "data": data})
    [message] = check_resource(resource)
    assert f"teardown: the teardown script is {MAX_SCRIPT_BYTES + 1} bytes, over" in message


def test_other_config_maps_are_not_its_business() -> None:
    other = config_map()
    plain = type(other)(other.type, {"metadata": {"name": "x"}, "data": {"a": "b"}})
    assert check_resource(plain) == []
