"""Hot reload against a directory laid out the way kubelet mounts a ConfigMap: the keys are
symlinks through `..data`, which kubelet swaps atomically to a new timestamped directory."""

import json
import re
import time
from pathlib import Path

import pytest

from provisioner.configuration.config import (
    DEFAULT_HELPER_POD_YAML,
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
    ConfigBundle,
    ConfigError,
)
from provisioner.configuration.config_watch import ConfigWatcher, NoValidConfigError


def config_json(path: str) -> str:
    return json.dumps(
        {"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": [path]}]}
    )


class MountedConfigMap:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.generation = 0

    def publish(self, **keys: str) -> None:
        """Writes a new version and swaps `..data` to it, as kubelet's atomic writer does."""
        self.generation += 1
        version = self.root / f"..2026_11_21_{self.generation:04d}"
        version.mkdir()
        for key, text in keys.items():
            (version / key).write_text(text)
        link = self.root / "..data_tmp"
        link.symlink_to(version.name)
        link.replace(self.root / "..data")
        for key in keys:
            target = self.root / key
            if not target.is_symlink():
                target.symlink_to(f"..data/{key}")


@pytest.fixture
def mounted(tmp_path: Path) -> MountedConfigMap:
    configmap = MountedConfigMap(tmp_path)
    configmap.publish(
        **{
            "config.json": config_json("/opt/first"),
            "setup": DEFAULT_SETUP_SCRIPT,
            "teardown": DEFAULT_TEARDOWN_SCRIPT,
            "helperPod.yaml": DEFAULT_HELPER_POD_YAML,
        }
    )
    return configmap


def make_watcher(
    root: Path, reloaded: list[ConfigBundle], refused: list[ConfigError]
) -> ConfigWatcher:
    return ConfigWatcher(
        root / "config.json",
        None,
        allow_unsafe_helper_template=False,
        on_reloaded=reloaded.append,
        on_invalid=refused.append,
    )


def base_paths(bundle: ConfigBundle) -> set[str]:
    return bundle.config.all_base_paths()


def test_a_valid_new_version_replaces_the_config(mounted: MountedConfigMap) -> None:
    reloaded: list[ConfigBundle] = []
    refused: list[ConfigError] = []
    watcher = make_watcher(mounted.root, reloaded, refused)
    assert base_paths(watcher.current) == {"/opt/first"}
    watcher.check_now()
    assert reloaded == []

    mounted.publish(
        **{
            "config.json": config_json("/opt/second"),
            "setup": '#!/bin/sh\nmkdir -p "$VOL_DIR"\n',
            "teardown": DEFAULT_TEARDOWN_SCRIPT,
            "helperPod.yaml": DEFAULT_HELPER_POD_YAML,
        }
    )
    watcher.check_now()
    assert base_paths(watcher.current) == {"/opt/second"}
    assert watcher.current.setup_script == '#!/bin/sh\nmkdir -p "$VOL_DIR"\n'
    assert len(reloaded) == 1
    assert refused == []


def test_an_invalid_version_is_refused_once_and_the_last_valid_stays(
    mounted: MountedConfigMap,
) -> None:
    reloaded: list[ConfigBundle] = []
    refused: list[ConfigError] = []
    watcher = make_watcher(mounted.root, reloaded, refused)
    mounted.publish(
        **{
            "config.json": config_json("opt/relative"),
            "setup": DEFAULT_SETUP_SCRIPT,
            "teardown": DEFAULT_TEARDOWN_SCRIPT,
            "helperPod.yaml": DEFAULT_HELPER_POD_YAML,
        }
    )
    watcher.check_now()
    watcher.check_now()
    assert base_paths(watcher.current) == {"/opt/first"}
    assert len(refused) == 1
    assert "nodePathMap[0].paths[0]" in str(refused[0])
    assert reloaded == []

    # Fixing the ConfigMap is picked up again.
    mounted.publish(
        **{
            "config.json": config_json("/opt/fixed"),
            "setup": DEFAULT_SETUP_SCRIPT,
            "teardown": DEFAULT_TEARDOWN_SCRIPT,
            "helperPod.yaml": DEFAULT_HELPER_POD_YAML,
        }
    )
    watcher.check_now()
    assert base_paths(watcher.current) == {"/opt/fixed"}
    assert len(reloaded) == 1


def test_an_unsafe_helper_template_is_refused(mounted: MountedConfigMap) -> None:
    reloaded: list[ConfigBundle] = []
    refused: list[ConfigError] = []
    watcher = make_watcher(mounted.root, reloaded, refused)
    privileged = DEFAULT_HELPER_POD_YAML.replace(
        "image:", "securityContext:\n      privileged: true\n    image:", 1
    )
    assert privileged != DEFAULT_HELPER_POD_YAML
    mounted.publish(
        **{
            "config.json": config_json("/opt/first"),
            "setup": DEFAULT_SETUP_SCRIPT,
            "teardown": DEFAULT_TEARDOWN_SCRIPT,
            "helperPod.yaml": privileged,
        }
    )
    watcher.check_now()
    assert len(refused) == 1
    assert str(refused[0]).startswith("helperPod.yaml: ")
    assert "privileged" in str(refused[0])


def test_a_missing_file_at_start_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(config_json("/opt/x"))
    watcher = make_watcher(tmp_path, [], [])
    assert not watcher.has_config()
    assert watcher.waiting_for is not None
    assert re.match(r"setup: cannot read .*setup", str(watcher.waiting_for))
    with pytest.raises(NoValidConfigError, match=r"setup: cannot read .*setup"):
        _ = watcher.current


def test_an_invalid_version_at_start_waits_for_the_first_valid_one(tmp_path: Path) -> None:
    mounted = MountedConfigMap(tmp_path)
    good_files = {
        "setup": DEFAULT_SETUP_SCRIPT,
        "teardown": DEFAULT_TEARDOWN_SCRIPT,
        "helperPod.yaml": DEFAULT_HELPER_POD_YAML,
    }
    mounted.publish(**{"config.json": config_json("opt/relative"), **good_files})
    reloaded: list[ConfigBundle] = []
    refused: list[ConfigError] = []
    watcher = make_watcher(mounted.root, reloaded, refused)
    assert not watcher.has_config()
    assert "nodePathMap[0].paths[0]" in str(watcher.waiting_for)
    # The start-up refusal is the caller's to report; an unchanged mount is not refused again.
    watcher.check_now()
    assert refused == []

    mounted.publish(**{"config.json": config_json("/"), **good_files})
    watcher.check_now()
    assert len(refused) == 1
    assert not watcher.has_config()
    assert "is the root directory" in str(watcher.waiting_for)

    mounted.publish(**{"config.json": config_json("/opt/fixed"), **good_files})
    watcher.check_now()
    assert watcher.has_config()
    assert watcher.waiting_for is None
    assert base_paths(watcher.current) == {"/opt/fixed"}
    assert [base_paths(bundle) for bundle in reloaded] == [{"/opt/fixed"}]


def test_the_watch_thread_picks_up_a_change(mounted: MountedConfigMap) -> None:
    reloaded: list[ConfigBundle] = []
    watcher = ConfigWatcher(
        mounted.root / "config.json",
        None,
        allow_unsafe_helper_template=False,
        on_reloaded=reloaded.append,
        on_invalid=lambda error: None,
        interval_seconds=0.05,
    )
    watcher.start()
    try:
        mounted.publish(
            **{
                "config.json": config_json("/opt/threaded"),
                "setup": DEFAULT_SETUP_SCRIPT,
                "teardown": DEFAULT_TEARDOWN_SCRIPT,
                "helperPod.yaml": DEFAULT_HELPER_POD_YAML,
            }
        )
        deadline = time.monotonic() + 5
        while not reloaded and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        watcher.stop()
    assert [base_paths(bundle) for bundle in reloaded] == [{"/opt/threaded"}]
