"""What an expansion leaves on the claim, as Kubernetes' own resize path leaves it for a volume
with no node step (the external-resizer's markControllerResizeInProgress, then
markOverallExpansionAsFinished): status.allocatedResources is the new size, and
allocatedResourceStatuses says ControllerResizeInProgress while it runs and nothing once done.
Since Kubernetes 1.34 quota and the recovery from a failed resize read allocatedResources; a
held-out storage test found it empty ("had 0 allocated size, expected 2Gi").

A claim grown by an earlier version (allocatedResources never set) gets it from the next
leader's first look.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import watch
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from localcluster.raw_api import call_json
from tests.provisioner.e2e.support import (
    ConfigFiles,
    ProvisionerSetup,
    default_config,
    eventually,
)

pytestmark = pytest.mark.cluster

NODE = {"kubernetes.io/hostname": "node-1"}
IN_PROGRESS = "ControllerResizeInProgress"

Allocation = tuple[str | None, str | None, str | None]
"""A claim's status.capacity, allocatedResources and allocatedResourceStatuses for storage."""


def allocation(claim: dict[str, Any]) -> Allocation:
    status = claim.get("status") or {}
    return (
        (status.get("capacity") or {}).get("storage"),
        (status.get("allocatedResources") or {}).get("storage"),
        (status.get("allocatedResourceStatuses") or {}).get("storage"),
    )


class ClaimStatuses:
    """Every status of one claim that a watch shows, from now until `stop`."""

    def __init__(self, setup: ProvisionerSetup, name: str) -> None:
        self.seen: list[Allocation] = []
        self._stopping = threading.Event()
        self._thread = threading.Thread(
            target=self._watch, args=(setup, name), name="claim-statuses", daemon=True
        )
        self._thread.start()

    def stop(self) -> list[Allocation]:
        self._stopping.set()
        self._thread.join(10)
        return self.seen

    def _watch(self, setup: ProvisionerSetup, name: str) -> None:
        while not self._stopping.is_set():
            try:
                stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
                    setup.core.list_namespaced_persistent_volume_claim,
                    setup.namespace,
                    field_selector=f"metadata.name={name}",
                    timeout_seconds=2,
                )
                for event in stream:
                    self.seen.append(allocation(event["raw_object"]))
                    if self._stopping.is_set():
                        break
            except (ApiException, HTTPError, OSError):
                self._stopping.wait(0.2)


def resizes_said(setup: ProvisionerSetup) -> int:
    """How often the provisioner said the claim's resize succeeded (repeats are counted)."""
    return sum(
        int(event.get("count") or 1)
        for event in setup.events("g")
        if event.get("reason") == "VolumeResizeSuccessful"
    )


@pytest.fixture
def grown(
    make_setup: Callable[..., ProvisionerSetup],
) -> Iterator[tuple[ProvisionerSetup, list[Allocation]]]:
    """A claim "g" of 1Gi, bound, then grown to 2Gi; with its statuses seen meanwhile."""
    setup = make_setup(ConfigFiles(config=default_config("/opt/expansion-status")))
    setup.start()
    storage_class = setup.create_class("grow")
    call_json(setup.storage.patch_storage_class, storage_class, {"allowVolumeExpansion": True})
    setup.create_claim("g", storage_class, size="1Gi")
    setup.create_consumer("g", "g", NODE)
    setup.wait_bound("g")
    statuses = ClaimStatuses(setup, "g")
    eventually(lambda: statuses.seen or None, 10, "the claim's watch")
    setup.core.patch_namespaced_persistent_volume_claim(
        "g", setup.namespace, {"spec": {"resources": {"requests": {"storage": "2Gi"}}}}
    )
    setup.wait_event("g", "VolumeResizeSuccessful")
    eventually(
        lambda: allocation(setup.claim("g"))[0] == "2Gi" or None, 10, "the claim's new capacity"
    )
    yield setup, statuses.stop()


def test_an_expansion_sets_allocated_resources_as_the_resize_path_does(
    grown: tuple[ProvisionerSetup, list[Allocation]],
) -> None:
    setup, seen = grown
    assert allocation(setup.claim("g")) == ("2Gi", "2Gi", None)
    assert ("1Gi", "2Gi", IN_PROGRESS) in seen, seen
    volume = setup.volume(setup.claim("g")["spec"]["volumeName"])
    assert volume is not None and volume["spec"]["capacity"]["storage"] == "2Gi"


def test_a_claim_grown_by_an_earlier_version_gets_allocated_resources_from_the_next_leader(
    grown: tuple[ProvisionerSetup, list[Allocation]],
) -> None:
    setup, _ = grown
    setup.stop_all()
    # As a version before this one left it: capacity grown, nothing allocated said.
    call_json(
        setup.core.patch_namespaced_persistent_volume_claim_status,
        "g",
        setup.namespace,
        {"status": {"allocatedResources": None, "allocatedResourceStatuses": None}},
    )
    assert allocation(setup.claim("g")) == ("2Gi", None, None)
    resized = resizes_said(setup)
    setup.start()
    eventually(
        lambda: allocation(setup.claim("g"))[1] == "2Gi" or None,
        30,
        "the next leader to set allocatedResources",
    )
    assert allocation(setup.claim("g")) == ("2Gi", "2Gi", None)
    assert resizes_said(setup) == resized, "a catch-up is not said as a resize"
