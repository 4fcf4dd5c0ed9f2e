"""Fixtures shared by every test folder: the real local cluster, started once per session.

The `cluster` fixture never skips: when the control plane cannot be had (binaries missing, a
component dies) the tests that need it fail with the harness's one-line reason.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from localcluster import ClusterError, ClusterOptions, LocalCluster
from scripts import build_image
from tests.faults.support import HelperPodRecorder
from tests.localcluster.image_pods import host_images
from tests.provisioner.e2e.support import ProvisionerSetup

_started: list[LocalCluster] = []


@pytest.fixture(scope="session")
def cluster() -> Iterator[LocalCluster]:
    """A running local cluster (3 kwok nodes node-1..node-3), stopped at the end of the session.
    The provisioner's Deployment runs the image of this working tree's tracked files, built
    (or reused from the cache) first."""
    problem = ""
    try:
        image = build_image.image()
        options = ClusterOptions(provisioner_image=image.directory, images=host_images())
        running = LocalCluster.start(options)
    except build_image.ImageBuildError as error:
        problem = f"the provisioner's image could not be built: {error}"
    except ClusterError as error:
        problem = str(error)
    if problem:  # failed outside the except block, so pytest shows the one line alone
        pytest.fail(problem, pytrace=False)
    _started.append(running)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def cluster_namespace(cluster: LocalCluster) -> Iterator[str]:
    """A fresh namespace (its default service account exists), deleted after the test."""
    name = f"test-{uuid.uuid4().hex[:8]}"
    cluster.create_namespace(name)
    yield name
    cluster.core_v1().delete_namespace(name)


@pytest.fixture
def record_helper_pods() -> Iterator[Callable[[ProvisionerSetup], HelperPodRecorder]]:
    """Starts a recorder of a setup's helper pods; every one is stopped after the test, however
    it ended (a recorder left running would outlive its cluster's API server)."""
    started: list[HelperPodRecorder] = []

    def start(setup: ProvisionerSetup) -> HelperPodRecorder:
        started.append(HelperPodRecorder(setup).start())
        return started[-1]

    yield start
    for recorder in started:
        recorder.stop()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for running in _started:
        terminalreporter.write_line(
            f"localcluster: session cluster ready in {running.startup_seconds:.1f}s"
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    """Keeps each test's call-phase report on the item, so fixtures can tell in their teardown
    whether the test failed (the provisioner fixtures then print the replicas' logs)."""
    report = yield
    if call.when == "call":
        item.rep_call = report  # type: ignore[attr-defined]
    return report
