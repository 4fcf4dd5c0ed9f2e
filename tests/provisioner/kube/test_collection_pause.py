"""The cycle collector's pause while informers list (collection_pause)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from provisioner.kube.collection_pause import collection_paused


@pytest.fixture
def collector_enabled() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if was:
        gc.enable()
    else:
        gc.disable()


@pytest.mark.usefixtures("collector_enabled")
def test_the_collector_runs_again_only_when_the_last_overlapping_pause_ends() -> None:
    first, second = collection_paused(), collection_paused()
    first.__enter__()
    assert not gc.isenabled()
    second.__enter__()
    first.__exit__(None, None, None)
    assert not gc.isenabled()
    second.__exit__(None, None, None)
    assert gc.isenabled()


@pytest.mark.usefixtures("collector_enabled")
def test_a_pause_ends_when_its_list_fails() -> None:
    with pytest.raises(RuntimeError), collection_paused():
        raise RuntimeError("list failed")
    assert gc.isenabled()


@pytest.mark.usefixtures("collector_enabled")
def test_a_collector_that_was_off_stays_off() -> None:
    gc.disable()
    with collection_paused():
        pass
    assert not gc.isenabled()
