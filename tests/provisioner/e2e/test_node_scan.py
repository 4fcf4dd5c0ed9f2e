"""The leader's node scan on the real cluster: the orphan metric, the per-volume used-bytes
metric (measured without following a link out of the volume), and the Warning on a claim whose
volume outgrew its capacity."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable

import pytest

from tests.provisioner.e2e.support import (
    ConfigFiles,
    ProvisionerSetup,
    default_config,
    eventually,
    volume_path,
)

pytestmark = pytest.mark.cluster
NODE = "node-1"
MIB = 1024 * 1024


def gauge(metrics: str, name: str, **labels: str) -> float | None:
    for line in metrics.splitlines():
        if not line.startswith(name + "{"):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line[: line.index("}")]))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_the_node_scan_counts_orphans_measures_usage_and_warns_on_an_outgrown_volume(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    base = f"/opt/scan-{uuid.uuid4().hex[:6]}"
    setup = make_setup(ConfigFiles(config=default_config(base)))
    outside = setup.node_path(NODE, "/srv/big-elsewhere")
    outside.mkdir(parents=True, exist_ok=True)
    (outside / "big.bin").write_bytes(b"\0" * (8 * MIB))
    host_base = setup.node_path(NODE, base)
    (host_base / "forgotten").mkdir(parents=True)
    replica = setup.start("--node-scan-interval", "2")
    storage_class = setup.create_class("scan")
    setup.create_claim("small", storage_class, size="1Mi")
    setup.create_consumer("small", "small", node_selector={"kubernetes.io/hostname": NODE})
    volume = setup.wait_bound("small")
    name = volume["metadata"]["name"]
    directory = setup.node_path(NODE, volume_path(volume))
    (directory / "link-out").symlink_to(outside)
    (directory / "data.bin").write_bytes(b"x" * (2 * MIB))

    def measured() -> float | None:
        used = gauge(replica.metrics(), "local_path_volume_used_bytes", volume=name, node=NODE)
        return used if used is not None and used >= 2 * MIB else None

    used = eventually(measured, 60, "the volume's used bytes to be measured")
    assert used < 4 * MIB, "the measurement followed the link out of the volume"
    assert gauge(replica.metrics(), "local_path_volume_used_bytes", storage_class=storage_class)

    event = setup.wait_event("small", "VolumeOutgrewCapacity", timeout=60)
    assert event["type"] == "Warning"
    assert (
        name in event["message"] and "more than its capacity of 1048576 bytes" in event["message"]
    )

    orphans = eventually(
        lambda: gauge(replica.metrics(), "local_path_orphan_directories", node=NODE) or None,
        60,
        "the orphan metric to count the planted directory",
    )
    assert orphans == 1
    assert (host_base / "forgotten").is_dir(), "the scan removed something"
    assert (outside / "big.bin").exists()
