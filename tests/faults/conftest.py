"""Fault injection against real provisioner processes on the session's local cluster.

The fixture is the end-to-end tests' `make_setup`, plus a purge after each test: fault tests
leave many volumes behind on purpose (crashed runs, dead nodes), and the next test's
provisioner should not have to list them.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from localcluster import LocalCluster
from localcluster.raw_api import call_json
from tests.faults.support import purge
from tests.provisioner.e2e.support import ConfigFiles, ProvisionerSetup


@pytest.fixture
def make_setup(
    cluster: LocalCluster, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[..., ProvisionerSetup]]:
    """Builds a per-test provisioner setup; on failure the replicas' logs are printed."""
    made: list[tuple[ProvisionerSetup, ConfigFiles]] = []

    def make(files: ConfigFiles | None = None) -> ProvisionerSetup:
        files = files or ConfigFiles()
        setup = ProvisionerSetup(cluster, tmp_path / f"setup-{len(made)}", files)
        made.append((setup, files))
        return setup

    yield make
    failed = getattr(request.node, "rep_call", None)
    for setup, files in made:
        setup.stop_all()
        if failed is not None and failed.failed:
            for replica in setup.replicas:
                print(f"--- provisioner log {replica.log_path} ---\n{replica.log()[-6000:]}")
        setup.cleanup()
        purge(setup, files)


@pytest.fixture
def node_names(cluster: LocalCluster) -> Iterator[Callable[[str], str]]:
    """Names for nodes the test adds; whichever of them still exist are deleted afterwards."""
    made: list[str] = []

    def name(prefix: str) -> str:
        made.append(f"{prefix}-{uuid.uuid4().hex[:6]}")
        return made[-1]

    yield name
    existing = {
        node["metadata"]["name"] for node in call_json(cluster.core_v1().list_node)["items"]
    }
    for node in made:
        if node in existing:
            with contextlib.suppress(Exception):
                cluster.delete_node(node)
