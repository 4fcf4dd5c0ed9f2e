"""Saving the PV after a setup: the directory is handed to the removal gate to give back
(`GiveBack`) only when a read proved that no PV of this claim's will point at it. Every other
outcome (a 5xx or 429 that may hide a commit, a lost answer, a read that failed) keeps it and
retries: removing it there would wipe a volume whose PV exists and binds.

The API answers are scripted in order; the cases that need the server to have committed are
on the local cluster in tests/faults/test_volume_save_faults.py."""

from __future__ import annotations

from typing import Any, cast

import pytest

from provisioner.configuration.config import (
    DEFAULT_HELPER_POD_YAML,
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
    load_config_bundle,
)
from provisioner.csi.driver_name import DEFAULT_DRIVER_NAME
from provisioner.helper_pods.pod_runs import RunResult
from provisioner.kube.api_error import ApiError
from provisioner.kube.metrics import Metrics
from provisioner.objects.records import ClaimRecord, StorageClassRecord
from provisioner.provisioning.actions import ActionFailed, Actions, GiveBack, VolumeSaveUnsettled
from provisioner.provisioning.claims import ProvisionPlan, build_persistent_volume
from provisioner.provisioning.removal_gate import RemovalKind

BUNDLE = load_config_bundle(
    '{"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": ["/opt/a"]}]}',
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
    DEFAULT_HELPER_POD_YAML,
)
ME = "local-path-storage.io/local-path"
CLAIM = ClaimRecord(
    uid="uid-1",
    namespace="ns",
    name="data",
    storage_class_name="local",
    access_modes=("ReadWriteOnce",),
    requested_storage="1Gi",
)
PLAN = ProvisionPlan(
    volume_name="pvc-uid-1",
    provisioner_name=ME,
    claim=CLAIM,
    storage_class=StorageClassRecord("local", ME),
    node_name="n1",
    node_affinity=("kubernetes.io/hostname", "n1"),
    base_path="/opt/a",
    path="/opt/a/pvc-uid-1_ns_data",
    volume_type="hostPath",
    size_bytes=1024**3,
)
OURS = build_persistent_volume(PLAN, DEFAULT_DRIVER_NAME)
FOREIGN = {**OURS, "spec": {**OURS["spec"], "claimRef": {"uid": "someone-else"}}}

Answer = dict[str, Any] | ApiError | OSError


class ScriptedApi:
    """Answers each (method) request with the next scripted answer for it."""

    def __init__(self, **answers: list[Answer]) -> None:
        self.answers = answers
        self.calls: list[str] = []

    def request_json(self, method: str, path: str, **_: Any) -> dict[str, Any]:
        self.calls.append(method)
        answer = self.answers[method].pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer


class Recorded:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def normal(self, involved: Any, reason: str, message: str) -> None:
        self.events.append((reason, message))

    warning = normal


def actions_on(api: ScriptedApi, recorded: Recorded) -> Actions:
    return Actions(
        cast(Any, api),
        cast(Any, recorded),
        Metrics(),
        pv_save_retry_delay=0.0,
    )


def save(api: ScriptedApi) -> Recorded:
    """Carries out the setup's end (the PV saved) against `api`; the events it recorded.
    Nothing on the node: `Actions` runs no helper pod (the helper pods are `HelperPods`'s)."""
    recorded = Recorded()
    actions_on(api, recorded).finish_provision(PLAN, RunResult(1.0), started=0.0)
    return recorded


def failing_save(api: ScriptedApi, error: type[ActionFailed]) -> Recorded:
    """Like `save`, for a save that fails with exactly `error`; a `GiveBack` is a plain one
    (not a clone's). Nothing is removed here either way: a give-back is the gate's to decide."""
    recorded = Recorded()
    actions = actions_on(api, recorded)
    with pytest.raises(ActionFailed) as raised:
        actions.finish_provision(PLAN, RunResult(1.0), started=0.0)
    assert type(raised.value) is error, raised.value
    if isinstance(raised.value, GiveBack):
        assert raised.value.kind is RemovalKind.GIVE_BACK
        recorded.events.append(("GiveBack", raised.value.why))
    return recorded


def unavailable() -> ApiError:
    return ApiError(503, "Service Unavailable")


def test_a_5xx_on_every_post_keeps_the_directory_and_retries() -> None:
    # The first POST was committed and only its answer turned into a 503: the PV exists.
    api = ScriptedApi(POST=[unavailable() for _ in range(5)])
    recorded = failing_save(api, VolumeSaveUnsettled)
    assert not any(reason == "ProvisioningFailed" for reason, _ in recorded.events)


def test_a_lost_answer_keeps_the_directory_and_retries() -> None:
    api = ScriptedApi(POST=[OSError("connection reset") for _ in range(5)])
    failing_save(api, VolumeSaveUnsettled)


@pytest.mark.parametrize(
    "read_error",
    [ApiError(429, "Too Many Requests"), unavailable(), OSError("read timed out")],
    ids=["429", "503", "no-answer"],
)
def test_a_failed_read_after_already_exists_is_no_proof_the_pv_is_foreign(
    read_error: ApiError | OSError,
) -> None:
    api = ScriptedApi(POST=[unavailable(), ApiError(409, "Conflict")], GET=[read_error])
    failing_save(api, VolumeSaveUnsettled)
    assert api.calls == ["POST", "POST", "GET"], "no more attempts after a failed read"


def test_already_exists_and_ours_after_a_5xx_is_success() -> None:
    api = ScriptedApi(POST=[unavailable(), ApiError(409, "Conflict")], GET=[OURS])
    save(api)


def test_a_foreign_pv_of_that_name_gives_the_directory_back() -> None:
    api = ScriptedApi(POST=[ApiError(409, "Conflict")], GET=[FOREIGN])
    recorded = failing_save(api, GiveBack)
    assert any("someone-else" in message for _, message in recorded.events)


def refused() -> ApiError:
    return ApiError(422, "Unprocessable Entity")


@pytest.mark.parametrize(
    ("posts", "reads", "removed"),
    [
        # refused outright every time, and a read shows none: the directory goes back
        ([refused() for _ in range(5)], [ApiError(404, "Not Found")], True),
        # refused, but a read shows one exists now (saved by a peer): kept
        ([refused() for _ in range(5)], [OURS], False),
        # refused, and the read fails: kept
        ([refused() for _ in range(5)], [unavailable()], False),
        # a 5xx once, refused after: that 5xx may still commit, so kept without a read
        ([unavailable(), *(refused() for _ in range(4))], [], False),
    ],
    ids=["absent", "present-now", "unread", "after-a-5xx"],
)
def test_only_a_read_showing_no_pv_after_outright_refusals_gives_it_back(
    posts: list[Answer], reads: list[Answer], removed: bool
) -> None:
    error: type[ActionFailed] = GiveBack if removed else VolumeSaveUnsettled
    failing_save(ScriptedApi(POST=posts, GET=reads), error)


def test_a_pv_gone_between_already_exists_and_the_read_is_saved_again() -> None:
    api = ScriptedApi(POST=[ApiError(409, "Conflict"), {}], GET=[ApiError(404, "Not Found")])
    save(api)
    assert api.calls == ["POST", "GET", "POST"]
