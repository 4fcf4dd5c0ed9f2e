"""config.json base paths with a budget: `{"path": "/data", "capacity": "100Gi"}` beside plain
strings, top level and per class; bad ones refused with the key path."""

import json

import pytest

from provisioner.configuration.class_parameters import size_range, validate_storage_class_parameters
from provisioner.configuration.config import (
    BasePath,
    ConfigError,
    NodePathMapEntry,
    parse_config_json,
)


def node_paths(*paths: object, node: str = "n1") -> str:
    return json.dumps({"nodePathMap": [{"node": node, "paths": list(paths)}]})


def test_strings_and_objects_mix_and_budgets_are_bytes() -> None:
    config = parse_config_json(node_paths("/a", {"path": "/b", "capacity": "10Gi"}, {"path": "/c"}))
    assert config.paths_for("any", "n1") == ["/a", "/b", "/c"]
    assert config.capacities_for("any", "n1") == {"/a": None, "/b": 10 * 1024**3, "/c": None}
    assert config.declares_capacity()
    assert config.all_base_paths() == {"/a", "/b", "/c"}


def test_decimal_and_binary_suffixes() -> None:
    config = parse_config_json(
        node_paths({"path": "/a", "capacity": "1G"}, {"path": "/b", "capacity": "1.5Ki"})
    )
    assert config.capacities_for("", "n1") == {"/a": 10**9, "/b": 1536}


def test_per_class_budgets_follow_the_class_and_default_node() -> None:
    config = parse_config_json(
        json.dumps(
            {
                "storageClassConfigs": {
                    "fast": {
                        "nodePathMap": [
                            {
                                "node": "DEFAULT_PATH_FOR_NON_LISTED_NODES",
                                "paths": [{"path": "/fast", "capacity": "1Gi"}],
                            }
                        ]
                    },
                    "shared": {"sharedFileSystemPath": "/shared"},
                }
            }
        )
    )
    assert config.capacities_for("fast", "whatever") == {"/fast": 1024**3}
    assert config.capacities_for("shared", "n1") == {}
    assert config.capacities_for("unknown", "n1") == {}
    assert config.declares_capacity()


def test_plain_strings_declare_no_capacity() -> None:
    config = parse_config_json(node_paths("/a"))
    assert not config.declares_capacity()
    assert config.capacities_for("", "n1") == {"/a": None}


def test_round_trip_keeps_each_entry_in_its_shape() -> None:
    text = node_paths("/a", {"path": "/b", "capacity": "100Gi"}, {"path": "/c"})
    written = json.loads(parse_config_json(text).to_config_json())
    assert written["nodePathMap"][0]["paths"] == [
        "/a",
        {"path": "/b", "capacity": "100Gi"},
        {"path": "/c"},
    ]
    assert parse_config_json(json.dumps(written)) == parse_config_json(text)


def test_keys_match_case_insensitively_like_the_rest_of_config_json() -> None:
    config = parse_config_json(node_paths({"Path": "/b", "CAPACITY": "1Mi"}))
    assert config.capacities_for("", "n1") == {"/b": 1024**2}


def test_models_built_in_python_accept_the_object_form() -> None:
    entry = NodePathMapEntry(node="n1", paths=["/a", BasePath(path="/b", capacity="2Gi")])
    assert entry.capacities() == {"/a": None, "/b": 2 * 1024**3}


BAD = [
    (
        {"path": "/b", "capacity": "10GB"},
        "nodePathMap[0].paths[0].capacity: '10GB' is not a Kubernetes quantity:"
        " write one such as 100Gi, 500M or 1073741824",
    ),
    ({"path": "/b", "capacity": "-1Gi"}, "nodePathMap[0].paths[0].capacity: '-1Gi' is not"),
    ({"path": "/b", "capacity": 100}, "nodePathMap[0].paths[0].capacity: must be a quantity"),
    ({"capacity": "1Gi"}, "nodePathMap[0].paths[0].path: is required"),
    ({"path": 3}, "nodePathMap[0].paths[0].path: must be a string"),
    ({"path": "/b", "size": "1Gi"}, "nodePathMap[0].paths[0].size: unknown key"),
    ({"path": "b"}, 'nodePathMap[0].paths[0]: "b" must be an absolute path'),
    ([], "nodePathMap[0].paths[0]: must be a string or an object"),
]


@pytest.mark.parametrize(("item", "expected"), BAD)
def test_bad_entries_name_their_key(item: object, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config_json(node_paths(item))
    assert str(caught.value).startswith(expected)


def test_bad_capacity_in_a_class_names_the_class() -> None:
    text = json.dumps(
        {
            "storageClassConfigs": {
                "fast": {
                    "nodePathMap": [{"node": "n1", "paths": [{"path": "/f", "capacity": "x"}]}]
                }
            }
        }
    )
    with pytest.raises(ConfigError, match=r'^storageClassConfigs\["fast"\]\.nodePathMap\[0\]'):
        parse_config_json(text)


def test_duplicate_key_in_a_path_object_is_refused() -> None:
    text = '{"nodePathMap": [{"node": "n1", "paths": [{"path": "/a", "path": "/b"}]}]}'
    with pytest.raises(ConfigError, match=r"nodePathMap\[0\]\.paths\[0\]\.path: is given more"):
        parse_config_json(text)


def test_the_same_path_as_string_and_object_is_a_duplicate() -> None:
    with pytest.raises(ConfigError, match=r"paths\[1\]: duplicate path"):
        parse_config_json(node_paths("/a", {"path": "/a", "capacity": "1Gi"}))


def test_nesting_is_checked_for_object_paths_too() -> None:
    with pytest.raises(ConfigError, match="lies inside the base path"):
        parse_config_json(node_paths({"path": "/a"}, {"path": "/a/b", "capacity": "1Gi"}))


def test_size_range_parameters() -> None:
    assert size_range({}) == (None, None)
    assert size_range({"minSize": "1Gi", "maxSize": "2G"}) == (1024**3, 2 * 10**9)
    with pytest.raises(ConfigError, match=r"^parameters\.maxSize: 'big' is not a Kubernetes"):
        size_range({"maxSize": "big"})
    with pytest.raises(ConfigError, match=r"^parameters\.minSize: 2Gi is larger than maxSize"):
        size_range({"minSize": "2Gi", "maxSize": "1Gi"})


def test_class_parameters_accept_and_check_sizes() -> None:
    config = parse_config_json(node_paths("/a"))
    validate_storage_class_parameters("c", {"minSize": "1Mi", "maxSize": "1Gi"}, {}, config)
    with pytest.raises(ConfigError, match=r"^parameters\.minSize"):
        validate_storage_class_parameters("c", {"minSize": "1 Mi"}, {}, config)
