"""`cluster` here is one real node, real-1 (a kubelet and containerd, no kwok node): the node
plugin registers with that kubelet."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from localcluster import ClusterOptions, LocalCluster
from scripts import build_image


@pytest.fixture(scope="package")
def cluster() -> Iterator[LocalCluster]:
    # The cluster's registry needs the provisioner's image, though these tests run none.
    image = build_image.image()
    started = LocalCluster.start(
        ClusterOptions(nodes=(), real_nodes=1, provisioner_image=image.directory)
    )
    try:
        yield started
    finally:
        started.stop()
