"""The helper runner emulates a container's termination-message file, as a kubelet does."""

from __future__ import annotations

from pathlib import Path

from localcluster.helper_pods import (
    Mount,
    termination_file_message,
    termination_message_mount,
)


def test_an_explicit_path_outside_dev_is_bind_mounted_from_a_file_of_the_pod(
    tmp_path: Path,
) -> None:
    source = tmp_path / "termination-log"
    assert termination_message_mount({"terminationMessagePath": "/tmp//result"}, source) == Mount(
        str(source), "/tmp/result"
    )
    for container in (
        {},
        {"terminationMessagePath": "/dev/termination-log"},
        {"terminationMessagePath": "rel"},
    ):
        assert termination_message_mount(container, source) is None


def test_only_the_first_4096_bytes_are_reported() -> None:
    assert termination_file_message(b"a" * 5000) == "a" * 4096
