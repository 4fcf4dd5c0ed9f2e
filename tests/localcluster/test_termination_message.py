"""The helper runner emulates a container's termination-message file, as a kubelet does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from localcluster.helper_pods import (
    Mount,
    pod_message_share,
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


def test_only_the_last_4096_bytes_of_the_file_are_read() -> None:
    """kubelet's getTerminationMessage reads the file with tail.ReadAtMost."""
    assert termination_file_message(b"b" * 904 + b"a" * 4096) == "a" * 4096


def test_each_container_keeps_the_first_bytes_of_its_share_of_12_kib() -> None:
    """kubelet's status manager (normalizeStatus) splits 12 KiB evenly over the containers."""
    pod: dict[str, Any] = {"spec": {"initContainers": [{}] * 13, "containers": [{}]}}
    assert pod_message_share(pod, "a" * 877 + "b" * 100) == "a" * 877
    assert pod_message_share({"spec": {"containers": [{}]}}, "a" * 4096) == "a" * 4096
