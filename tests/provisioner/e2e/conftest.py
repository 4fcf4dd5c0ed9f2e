"""The provisioner under test: real processes against the session's local cluster."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from localcluster import LocalCluster
from tests.provisioner.e2e.support import ConfigFiles, ProvisionerSetup

pytestmark = pytest.mark.cluster


@pytest.fixture
def make_setup(
    cluster: LocalCluster, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[..., ProvisionerSetup]]:
    """Builds a per-test provisioner setup; on failure the replicas' logs are printed."""
    made: list[ProvisionerSetup] = []

    def make(files: ConfigFiles | None = None) -> ProvisionerSetup:
        setup = ProvisionerSetup(cluster, tmp_path / f"setup-{len(made)}", files or ConfigFiles())
        made.append(setup)
        return setup

    yield make
    failed = getattr(request.node, "rep_call", None)
    for setup in made:
        setup.stop_all()
        if failed is not None and failed.failed:
            for replica in setup.replicas:
                print(f"--- provisioner log {replica.log_path} ---\n{replica.log()[-6000:]}")
        setup.cleanup()


@pytest.fixture
def provisioner(make_setup: Callable[..., ProvisionerSetup]) -> ProvisionerSetup:
    """One leader replica with the default config (/opt/local-path-provisioner everywhere)."""
    setup = make_setup()
    setup.start()
    return setup
