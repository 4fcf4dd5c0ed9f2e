"""Which keys the stack file sets in the project namespace, and which of them are secrets."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import yaml

from components import stack_config


def keys_of(
    tmp_path: Path, config: dict[str, object], stack_dir: str = "stacks"
) -> dict[str, bool]:
    (tmp_path / "Pulumi.yaml").write_text(
        yaml.safe_dump({"name": "local-path-storage", "stackConfigDir": stack_dir}),
        encoding="utf-8",
    )
    (tmp_path / stack_dir).mkdir(exist_ok=True)
    (tmp_path / stack_dir / "Pulumi.dev.yaml").write_text(
        yaml.safe_dump({"config": config}), encoding="utf-8"
    )
    with (
        mock.patch("pulumi.get_root_directory", return_value=str(tmp_path)),
        mock.patch("pulumi.get_stack", return_value="dev"),
    ):
        return stack_config.stack_file_keys()


def test_own_keys_with_their_secrecy(tmp_path: Path) -> None:
    keys = keys_of(
        tmp_path,
        {
            "local-path-storage:replicas": 2,
            "local-path-storage:nodePathmap": [],
            "local-path-storage:setupScript": {"secure": "v1:abc"},
            "local-path-storage:storageClasses": [
                {"name": "x", "parameters": {"nodePath": {"secure": "v1:def"}}}
            ],
            "local-path-storage:helperPodTemplate": {"spec": {"secure": "not", "other": 1}},
            "kubernetes:kubeconfig": {"secure": "v1:ghi"},
        },
    )
    assert keys == {
        "replicas": False,
        "nodePathmap": False,
        "setupScript": True,
        "storageClasses": True,
        "helperPodTemplate": False,
    }


def test_no_stack_file_means_no_keys(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.yaml").write_text("name: local-path-storage\n", encoding="utf-8")
    with (
        mock.patch("pulumi.get_root_directory", return_value=str(tmp_path)),
        mock.patch("pulumi.get_stack", return_value="dev"),
    ):
        assert stack_config.stack_file_keys() == {}


def test_outside_an_engine_run_there_is_no_stack_file() -> None:
    with mock.patch("pulumi.get_root_directory", return_value=None):
        assert stack_config.stack_file_keys() == {}
