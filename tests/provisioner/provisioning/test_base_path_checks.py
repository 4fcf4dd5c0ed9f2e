"""config.json's `create` and `mountPoint` for a base path, and what every helper pod does with
them (see provisioner/provisioning/base_path_checks.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from provisioner.configuration.config import (
    DEFAULT_HELPER_POD_YAML,
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
    RANCHER_DEFAULT_PATH,
    BasePathRules,
    ConfigError,
    load_config_bundle,
    parse_config_json,
)
from provisioner.helper_pods.batch_pod_shapes import is_batchable
from provisioner.helper_pods.pod_shapes import PREPARE_SCRIPT, build_helper_pod, helper_steps
from provisioner.provisioning.base_path_checks import missing_base_path_hint, mountinfo_path
from provisioner.provisioning.volume_decisions import TeardownPlan
from provisioner.scans.node_scripts import build_listing_pod
from tests.provisioner.helper_pods.test_helper_scripts import make_base, run_script
from tests.provisioner.removal_permits import permit_for

MUST_EXIST = "/data"
MOUNTED = "/mnt/disk"
SHARED = "/mnt/nfs"


def parsed(*paths: Any) -> Any:
    return parse_config_json(json.dumps({"nodePathMap": [{"node": "n", "paths": list(paths)}]}))


def test_only_rancher_s_default_path_is_made_unless_config_json_says_so() -> None:
    config = parsed(
        RANCHER_DEFAULT_PATH,
        MUST_EXIST,
        {"path": "/made", "create": True},
        {"path": MOUNTED, "mountPoint": True, "capacity": "1Gi"},
        {"path": "/budget", "capacity": "1Gi"},
    )
    assert config.base_path_rules(RANCHER_DEFAULT_PATH) == BasePathRules(create=True)
    assert config.base_path_rules(MUST_EXIST) == BasePathRules(create=False)
    assert config.base_path_rules("/made") == BasePathRules(create=True)
    assert config.base_path_rules(MOUNTED) == BasePathRules(create=False, mount_point=True)
    assert config.base_path_rules("/budget") == BasePathRules(create=False)
    shared = parse_config_json(json.dumps({"sharedFileSystemPath": SHARED}))
    assert shared.base_path_rules(SHARED) == BasePathRules(create=True)
    again = parse_config_json(config.to_config_json())
    assert again.base_path_rules(MOUNTED) == config.base_path_rules(MOUNTED)
    assert again.base_path_rules("/made") == config.base_path_rules("/made")


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ({"path": "/d", "create": "yes"}, "nodePathMap[0].paths[0].create: must be true or false"),
        ({"path": "/d", "mountPoint": 1}, "nodePathMap[0].paths[0].mountPoint: must be true or"),
        (
            {"path": "/d", "mountPoint": True, "create": True},
            "nodePathMap[0].paths[0].create: a mount point is never created",
        ),
        ({"path": "/d", "mount": True}, "nodePathMap[0].paths[0].mount: unknown key"),
    ],
)
def test_bad_settings_are_refused(entry: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parsed(entry)
    assert str(caught.value).startswith(expected)


def test_one_path_has_one_set_of_rules_wherever_it_is_listed() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config_json(
            json.dumps(
                {
                    "nodePathMap": [
                        {"node": "a", "paths": [{"path": "/d", "create": True}]},
                        {"node": "b", "paths": ["/d"]},
                    ]
                }
            )
        )
    assert str(caught.value) == (
        'nodePathMap[1].paths[0]: "/d" has other create/mountPoint settings than at'
        " nodePathMap[0].paths[0]: give it the same ones everywhere"
    )


BUNDLE = load_config_bundle(
    json.dumps(
        {
            "nodePathMap": [
                {
                    "node": "DEFAULT_PATH_FOR_NON_LISTED_NODES",
                    "paths": [
                        MUST_EXIST,
                        RANCHER_DEFAULT_PATH,
                        {"path": MOUNTED, "mountPoint": True},
                    ],
                }
            ]
        }
    ),
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
    DEFAULT_HELPER_POD_YAML,
)


def target(base: str, number: int = 1) -> TeardownPlan:
    name = f"pvc-{number}"
    return TeardownPlan(
        name, f"{base}/{name}_ns_c", "node-1", "Filesystem", 0, True, False, base_path=base
    )


def host_paths(pod: dict[str, Any]) -> dict[str, str]:
    return {
        v["hostPath"]["path"]: v["hostPath"]["type"]
        for v in pod["spec"]["volumes"]
        if "hostPath" in v
    }


def test_a_base_path_that_must_exist_is_never_made_by_a_helper_pod() -> None:
    volume = target(MUST_EXIST)
    assert helper_steps("create", volume, BUNDLE.config) == ("prepare", "create")
    assert not is_batchable("create", volume, BUNDLE)
    for step in ("prepare", "create", "delete"):
        permit = permit_for(volume) if step == "delete" else None
        pod = build_helper_pod(step, volume, BUNDLE, "ns", "sa", permit=permit)
        assert set(host_paths(pod).values()) == {"Directory"}, step
    listing = build_listing_pod(BUNDLE, "ns", "sa", node="node-1", base_path=MUST_EXIST, owned=[])
    assert host_paths(listing) == {MUST_EXIST: "Directory"}
    # Its teardowns keep their own pods: a missing directory holds only its own.
    assert not is_batchable("delete", volume, BUNDLE)


def test_rancher_s_default_path_is_made_as_before() -> None:
    volume = target(RANCHER_DEFAULT_PATH)
    assert helper_steps("create", volume, BUNDLE.config) == ("create",)
    assert is_batchable("create", volume, BUNDLE)
    assert host_paths(build_helper_pod("create", volume, BUNDLE, "ns", "sa")) == {
        RANCHER_DEFAULT_PATH: "DirectoryOrCreate",
        volume.path: "DirectoryOrCreate",
    }


def prepare_env(base: str) -> dict[str, str]:
    pod = build_helper_pod("prepare", target(base), BUNDLE, "ns", "sa")
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}


def test_prepare_checks_a_declared_mount_point_only() -> None:
    assert prepare_env(MOUNTED)["LPS_MOUNT_POINT"] == MOUNTED
    assert "LPS_MOUNT_POINT" not in prepare_env(MUST_EXIST)
    assert mountinfo_path("/mnt/my disk\\x") == "/mnt/my\\040disk\\134x"


def mountinfo(tmp_path: Path, base: Path, root: str) -> dict[str, str]:
    text = (
        "22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n"
        f"41 22 8:17 {root} {mountinfo_path(str(base))} rw,relatime - ext4 /dev/sdb1 rw\n"
    )
    (tmp_path / "mountinfo").write_text(text)
    return {
        "LPS_MOUNTINFO": str(tmp_path / "mountinfo"),
        "LPS_MOUNT_POINT": mountinfo_path(str(base)),
    }


@pytest.mark.parametrize("name", ["disk", "my disk"])
def test_prepare_makes_the_volume_only_on_a_mounted_filesystem(tmp_path: Path, name: str) -> None:
    (tmp_path / name).mkdir()
    base = make_base(tmp_path / name)
    volume = base / "pvc-1_ns_c"
    mounted = run_script(PREPARE_SCRIPT, base, volume, extra_env=mountinfo(tmp_path, base, "/"))
    assert mounted.returncode == 0, mounted.stderr
    assert volume.is_dir()
    volume.rmdir()
    # The base path's directory on the root filesystem, seen through a bind mount: its root
    # within that filesystem is the directory, not "/".
    bound = run_script(PREPARE_SCRIPT, base, volume, extra_env=mountinfo(tmp_path, base, str(base)))
    assert bound.returncode == 1
    assert f"its base path {base} is declared a mount point" in bound.stderr
    assert not volume.exists()


def test_prepare_without_a_declared_mount_point_reads_no_mountinfo(tmp_path: Path) -> None:
    base = make_base(tmp_path)
    done = run_script(
        PREPARE_SCRIPT, base, base / "pvc-1_ns_c", extra_env={"LPS_MOUNTINFO": "/nonexistent"}
    )
    assert done.returncode == 0, done.stderr


def test_a_setup_that_never_started_names_the_base_path_that_must_exist() -> None:
    assert missing_base_path_hint("/data", "node-1", BasePathRules(create=True)) == ""
    hint = missing_base_path_hint("/data", "node-1", BasePathRules(create=False))
    assert "the base path /data must exist on node node-1" in hint
    assert "create: true" in hint
