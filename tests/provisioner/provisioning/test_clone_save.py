"""A clone's PV is saved only when its source, read again from the API server after the copy
(once, before the first save), is still there, bound to the same volume: otherwise the copy may
miss files and is handed to the removal gate to give back. A read that fails proves nothing:
the copy is kept and the provision retried."""

from __future__ import annotations

import dataclasses
from typing import Any, cast

import pytest

from provisioner.helper_pods.pod_runs import RunResult
from provisioner.kube.api_error import ApiError
from provisioner.kube.metrics import Metrics
from provisioner.provisioning.actions import ActionFailed, Actions, GiveBack
from provisioner.provisioning.clones import CloneSource
from provisioner.provisioning.removal_gate import RemovalKind
from tests.provisioner.provisioning.test_volume_save import (
    ME,
    OURS,
    PLAN,
    Recorded,
    ScriptedApi,
)

SOURCE = CloneSource(
    claim_namespace="ns",
    claim_name="src",
    claim_uid="uid-src",
    volume_name="pvc-uid-src",
    path="/opt/a/pvc-uid-src_ns_src",
    base_path="/opt/a",
    node_name="n1",
)
CLONE_PLAN = dataclasses.replace(PLAN, clone_source=SOURCE)
SOURCE_CLAIM = {
    "metadata": {"name": "src", "namespace": "ns", "uid": "uid-src"},
    "spec": {"volumeName": "pvc-uid-src"},
}
SOURCE_VOLUME = {
    "metadata": {"name": "pvc-uid-src", "annotations": {"pv.kubernetes.io/provisioned-by": ME}},
    "spec": {"hostPath": {"path": SOURCE.path}},
    "status": {"phase": "Bound"},
}
NOT_FOUND = ApiError(404, "Not Found")


def finish(api: ScriptedApi, metrics: Metrics | None = None) -> ActionFailed | None:
    """The clone's end against `api`: None when its PV was saved, else why not."""
    actions = Actions(
        cast(Any, api),
        cast(Any, Recorded()),
        metrics or Metrics(),
        pv_save_retry_delay=0.0,
    )
    try:
        problem = actions.clone_source_problem(SOURCE)
        actions.finish_provision(CLONE_PLAN, RunResult(1.0), started=0.0, clone_problem=problem)
    except ActionFailed as error:
        return error
    return None


def test_a_clone_whose_source_is_still_there_is_saved() -> None:
    api = ScriptedApi(GET=[SOURCE_CLAIM, SOURCE_VOLUME], POST=[OURS])
    error = finish(api, metrics := Metrics())
    assert error is None
    assert api.calls == ["GET", "GET", "POST"]
    # Counted as the library counts a provision from a data source: by the source's kind.
    labels = {"class": "local", "source": "PersistentVolumeClaim"}
    sample = "controller_persistentvolumeclaim_provision_total"
    assert metrics.registry.get_sample_value(sample, labels) == 1


@pytest.mark.parametrize(
    ("claim", "volume", "why"),
    [
        (NOT_FOUND, SOURCE_VOLUME, "was deleted during the copy"),
        (
            {**SOURCE_CLAIM, "metadata": {**SOURCE_CLAIM["metadata"], "deletionTimestamp": "x"}},
            SOURCE_VOLUME,
            "began to be deleted during the copy",
        ),
        (SOURCE_CLAIM, {**SOURCE_VOLUME, "status": {"phase": "Released"}}, "released or deleted"),
        (SOURCE_CLAIM, NOT_FOUND, "lost its volume during the copy"),
    ],
)
def test_a_clone_whose_source_went_during_the_copy_is_given_back(
    claim: object, volume: object, why: str
) -> None:
    api = ScriptedApi(GET=[claim, volume])  # type: ignore[list-item]
    error = finish(api)
    assert isinstance(error, GiveBack)
    assert error.kind is RemovalKind.CLONE_GIVE_BACK
    assert "POST" not in api.calls
    assert why in error.why
    assert error.why.endswith("so the copy may miss files")


def test_a_failed_read_of_the_source_keeps_the_copy_and_retries() -> None:
    api = ScriptedApi(GET=[ApiError(500, "Internal Server Error")])
    error = finish(api)
    assert error is not None
    assert "500" in str(error)
    assert not isinstance(error, GiveBack)
    assert "POST" not in api.calls
