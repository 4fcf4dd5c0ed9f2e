"""The end-to-end fixtures on a cluster of real nodes: `cluster` here is real-1 and real-2 only
(no kwok node), one for this package, so `make_setup` and `record_helper_pods` serve the
provisioner's claims there, every pod run by a real kubelet."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from localcluster import LocalCluster
from tests.faults.support import HelperPodRecorder
from tests.provisioner.e2e.real_nodes.support import Serve, real_node_cluster, serve
from tests.provisioner.e2e.support import ProvisionerSetup


@pytest.fixture(scope="package")
def cluster() -> Iterator[LocalCluster]:
    with real_node_cluster() as started:
        yield started


@pytest.fixture
def serving(
    cluster: LocalCluster,
    make_setup: Callable[..., ProvisionerSetup],
    record_helper_pods: Callable[[ProvisionerSetup], HelperPodRecorder],
) -> Serve:
    """`serving(base, **files)`: `support.serve` on this package's cluster."""

    def start(base: str, **files: Any) -> tuple[ProvisionerSetup, HelperPodRecorder]:
        return serve(cluster, make_setup, record_helper_pods, base, **files)

    return start
