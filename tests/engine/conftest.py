"""Fixtures of the engine tests: the real Pulumi engine, stacks of this project, the cluster.

The engine fixture never skips: when neither `pulumi` on PATH nor the engine bundle is there,
every engine test fails with the one line that names both ways to get it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from localcluster import LocalCluster
from scripts.pulumi_engine import EngineUnavailableError, PulumiEngine, find_engine
from tests.engine.support import StackFactory


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).parent == Path(__file__).parent:
            item.add_marker(pytest.mark.engine)
            item.add_marker(pytest.mark.cluster)


@pytest.fixture(scope="session")
def pulumi_engine() -> PulumiEngine:
    problem = ""
    try:
        return find_engine()
    except EngineUnavailableError as error:
        problem = str(error)
    pytest.fail(problem, pytrace=False)


@pytest.fixture(scope="session")
def engine_state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One file backend for the session's stacks (each stack has its own name in it)."""
    return tmp_path_factory.mktemp("pulumi-state")


@pytest.fixture
def stacks(
    pulumi_engine: PulumiEngine, cluster: LocalCluster, tmp_path: Path, engine_state_dir: Path
) -> Iterator[StackFactory]:
    """Makes stacks for this test; destroys and removes them at its end."""
    factory = StackFactory(pulumi_engine, cluster, tmp_path, engine_state_dir)
    yield factory
    factory.cleanup()
