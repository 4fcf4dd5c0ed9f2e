"""What the node plugin's tests with real mounts share."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from provisioner.csi.mounts import read_mount_table


@pytest.fixture
def unmount_leftovers(tmp_path: Path) -> Iterator[None]:
    """After the test, whatever is still mounted under its tmp_path (a test that failed before
    its unpublish) is unmounted, deepest first, so no mount outlives the test."""
    yield
    inside = str(tmp_path) + "/"
    points = {
        entry.mount_point for entry in read_mount_table() if entry.mount_point.startswith(inside)
    }
    for point in sorted(points, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], check=True)
