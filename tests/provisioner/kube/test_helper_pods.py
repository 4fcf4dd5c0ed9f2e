"""The helper-pod runner against an in-memory pod API with scripted watch sessions and a fake
clock (timeouts cost nothing); test_helper_pods_cluster.py runs real pods."""

import copy
import functools
from collections.abc import Callable, Mapping
from typing import Any, cast

import pytest

from provisioner.helper_pods.pod_runner import (
    KUBELET_SYNC_MARGIN_SECONDS,
    SPEC_HASH_ANNOTATION,
    HelperPodFailed,
    HelperPodNotStarted,
    HelperPodTimeout,
    PodRunner,
    PodState,
    never_ran,
    run_through,
    run_timeout,
    spec_hash,
)
from provisioner.kube.api_error import ApiError
from provisioner.kube.client import DEFAULT_REQUEST_TIMEOUT, KubeClients, Timeout
from tests.provisioner.kube.fakes import FakeClock, FakeResponse, watch_chunks

Pod = dict[str, Any]

MANIFEST: Pod = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "helper-create-pvc-1",
        "namespace": "lps",
        "labels": {"local-path-storage.io/helper-pod": "true"},
    },
    "spec": {
        "restartPolicy": "Never",
        "nodeName": "node-1",
        "containers": [{"name": "helper", "image": "busybox"}],
    },
}

RUNNING: Pod = {"phase": "Running", "containerStatuses": [{"state": {"running": {}}}]}
SUCCEEDED: Pod = {
    "phase": "Succeeded",
    "containerStatuses": [{"state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}],
}
FAILED: Pod = {
    "phase": "Failed",
    "containerStatuses": [
        {
            "state": {
                "terminated": {
                    "exitCode": 3,
                    "reason": "Error",
                    "message": "mkdir: /data/x: Permission denied\n",
                }
            }
        }
    ],
}
PULL_BACKOFF: Pod = {
    "phase": "Pending",
    "containerStatuses": [
        {"state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling"}}}
    ],
}
Step = Pod | str | Exception


class FakePodApi:
    """request_json over a dict of pods, and pod watches (`list_function`) that play the
    next scripted session (statuses, "DELETED", or an exception to raise) and otherwise stay
    quiet until their timeout, advancing the fake clock. Deletes with a uid precondition are
    only recorded (the pod goes away when a session says "DELETED"), like a graceful delete."""

    def __init__(self, clock: FakeClock, sessions: list[list[Step]] | None = None) -> None:
        self.clock = clock
        self.pods: dict[str, Pod] = {}
        self.sessions = list(sessions or [])
        self.requests: list[tuple[str, str, Any]] = []
        self.watches: list[dict[str, Any]] = []
        self.version = 0
        self.forbid_create = False
        self.fail_reads = 0
        self.events: list[dict[str, Any]] | None = None
        """The namespace's events; None: reading them is forbidden (no such right)."""

    def _stamp(self, pod: Pod) -> Pod:
        self.version += 1
        pod["metadata"]["resourceVersion"] = str(self.version)
        return copy.deepcopy(pod)

    def request_json(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int | bool] | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: Timeout = DEFAULT_REQUEST_TIMEOUT,
    ) -> dict[str, Any]:
        self.requests.append((method, path, body))
        if method == "POST":
            if self.forbid_create:
                raise ApiError(status=403, reason="Forbidden")
            name = body["metadata"]["name"]
            if name in self.pods:
                raise ApiError(status=409, reason="AlreadyExists")
            pod = copy.deepcopy(body)
            pod["metadata"]["uid"] = f"uid-{self.version}"
            pod["status"] = {"phase": "Pending"}
            self.pods[name] = pod
            return self._stamp(pod)
        if method == "GET" and path.endswith("/events"):
            if self.events is None:
                raise ApiError(status=403, reason="Forbidden")
            uid = str((query or {})["fieldSelector"]).removeprefix("involvedObject.uid=")
            return {"items": [e for e in self.events if e["involvedObject"]["uid"] == uid]}
        name = path.rsplit("/", 1)[1]
        if name not in self.pods:
            raise ApiError(status=404, reason="Not Found")
        if method == "GET":
            if self.fail_reads:
                self.fail_reads -= 1
                raise OSError("connection refused")
            return copy.deepcopy(self.pods[name])
        if method == "DELETE":
            if not body.get("preconditions"):
                del self.pods[name]
            return {}
        raise AssertionError(method)

    def list_function(self, path: str) -> Callable[..., FakeResponse]:
        namespace = path.removeprefix("/api/v1/namespaces/").removesuffix("/pods")
        return functools.partial(self.list_namespaced_pod, namespace)

    def list_namespaced_pod(self, namespace: str, **kwargs: Any) -> FakeResponse:
        assert kwargs["watch"] is True
        assert kwargs["_preload_content"] is False
        self.watches.append(kwargs)
        name = kwargs["field_selector"].removeprefix("metadata.name=")
        if not self.sessions:
            self.clock.advance(kwargs["timeout_seconds"])
            return FakeResponse(chunks=[])
        events = []
        for step in self.sessions.pop(0):
            if step == "DELETED":
                events.append({"type": "DELETED", "object": self.pods.pop(name)})
            elif isinstance(step, Exception):
                raise step
            else:
                self.clock.advance(1)
                self.pods[name]["status"] = step
                events.append({"type": "MODIFIED", "object": self._stamp(self.pods[name])})
        return FakeResponse(chunks=watch_chunks(*events))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def run(
    api: FakePodApi,
    clock: FakeClock,
    timeout: float = 120.0,
    grace: float = 20.0,
    manifest: Pod = MANIFEST,
) -> float:
    runner = PodRunner(cast(KubeClients, api), start_failure_grace=grace, clock=clock)
    return runner.run(manifest, timeout)


def methods(api: FakePodApi) -> list[str]:
    return [request[0] for request in api.requests]


def test_success_returns_the_duration_and_deletes_the_pod(clock: FakeClock) -> None:
    api = FakePodApi(clock, [[RUNNING], [SUCCEEDED]])
    assert run(api, clock) == pytest.approx(2)
    assert methods(api) == ["POST", "DELETE"]
    _, _, created = api.requests[0]
    assert created["metadata"]["annotations"][SPEC_HASH_ANNOTATION] == spec_hash(MANIFEST)
    assert "annotations" not in MANIFEST["metadata"]
    _, path, options = api.requests[1]
    assert path == "/api/v1/namespaces/lps/pods/helper-create-pvc-1"
    assert options["propagationPolicy"] == "Background"
    assert api.pods == {}
    assert api.watches[0]["field_selector"] == "metadata.name=helper-create-pvc-1"
    assert api.watches[0]["resource_version"] == "1"


def test_several_changes_arrive_on_one_watch(clock: FakeClock) -> None:
    api = FakePodApi(clock, [[RUNNING, RUNNING, SUCCEEDED]])
    run(api, clock)
    assert len(api.watches) == 1


def test_failure_reports_exit_code_reason_and_log_tail_at_once(clock: FakeClock) -> None:
    api = FakePodApi(clock, [[RUNNING, FAILED]])
    with pytest.raises(HelperPodFailed) as failure:
        run(api, clock)
    assert failure.value.exit_code == 3
    assert failure.value.reason == "Error"
    assert "Permission denied" in failure.value.log_tail
    assert "exit code 3" in str(failure.value)
    assert failure.value.duration == pytest.approx(2)
    assert methods(api) == ["POST", "DELETE"]


def test_a_failed_pod_without_container_status_reports_the_pod_reason(clock: FakeClock) -> None:
    rejected = {"phase": "Failed", "reason": "OutOfcpu", "message": "Node didn't have enough"}
    api = FakePodApi(clock, [[rejected]])
    with pytest.raises(HelperPodFailed) as failure:
        run(api, clock)
    assert (failure.value.exit_code, failure.value.reason) == (None, "OutOfcpu")


def test_timeout_when_nothing_happens(clock: FakeClock) -> None:
    api = FakePodApi(clock, [[RUNNING]])
    with pytest.raises(HelperPodTimeout) as timeout:
        run(api, clock, timeout=30)
    assert "Running" in str(timeout.value)
    assert timeout.value.duration == pytest.approx(30)
    assert methods(api) == ["POST", "DELETE"]
    # The watch itself was bounded by the remaining time, not a fixed poll interval.
    assert api.watches[-1]["timeout_seconds"] == 29


def test_a_pod_with_its_own_deadline_is_followed_until_its_kubelet_enforced_it(
    clock: FakeClock,
) -> None:
    """A kubelet acts on activeDeadlineSeconds, counted from the pod's start on the node, at its
    next sync, and reports the pod Failed only after the containers' grace: the run waits that
    long, so that the kubelet's verdict is what it reports."""
    manifest = copy.deepcopy(MANIFEST)
    manifest["spec"].update(activeDeadlineSeconds=10, terminationGracePeriodSeconds=5)
    assert run_timeout(manifest, 10) == 10 + 5 + KUBELET_SYNC_MARGIN_SECONDS
    assert run_timeout(MANIFEST, 10) == 10
    api = FakePodApi(clock, [[RUNNING]])
    with pytest.raises(HelperPodTimeout) as timeout:
        run(api, clock, timeout=10, manifest=manifest)
    assert timeout.value.duration == pytest.approx(10 + 5 + KUBELET_SYNC_MARGIN_SECONDS)


def test_a_pod_ended_at_its_deadline_fails_with_the_kubelet_s_reason(clock: FakeClock) -> None:
    killed = {
        "phase": "Failed",
        "reason": "DeadlineExceeded",
        "message": "Pod was active on the node longer than the specified deadline",
        "containerStatuses": [
            {"state": {"terminated": {"exitCode": 137, "reason": "Error", "message": "hung\n"}}}
        ],
    }
    api = FakePodApi(clock, [[RUNNING, killed]])
    with pytest.raises(HelperPodFailed) as failure:
        run(api, clock)
    assert (failure.value.exit_code, failure.value.reason) == (137, "DeadlineExceeded")
    assert "failed (DeadlineExceeded, exit code 137): hung" in str(failure.value)


UNMOUNTED: Pod = {
    "phase": "Failed",
    "reason": "DeadlineExceeded",
    "message": "Pod was active on the node longer than the specified deadline",
    "containerStatuses": [
        {
            "state": {
                "terminated": {
                    "exitCode": 137,
                    "reason": "ContainerStatusUnknown",
                    "message": "The container could not be located when the pod was terminated",
                    "startedAt": None,
                }
            }
        }
    ],
}


def test_a_container_its_kubelet_never_created_has_no_exit_code() -> None:
    """What a real kubelet reports for a pod failed at its deadline while its hostPath could
    not be mounted: the container terminated with a made-up 137, ContainerStatusUnknown."""
    state = PodState.of({"status": UNMOUNTED})
    assert (state.exit_code, state.reason) == (None, "DeadlineExceeded")


def test_a_helper_whose_code_never_ran_is_told_from_one_that_failed() -> None:
    """What the missing-base-path hint hangs on: a pod that never started or never finished,
    or that its kubelet failed at its deadline before any container ran (a hostPath that
    could not be mounted), against a script that ran and failed, timed out or not."""
    assert never_ran(HelperPodTimeout("p", 10, "Pending, waiting: ContainerCreating"))
    assert never_ran(HelperPodNotStarted("p", "ImagePullBackOff"))
    assert never_ran(HelperPodFailed("p", None, "DeadlineExceeded", "Pod was active ..."))
    assert not never_ran(HelperPodFailed("p", 137, "DeadlineExceeded", "hanging"))
    assert not never_ran(HelperPodFailed("p", 7, "Error", "disk on fire"))
    assert not never_ran(HelperPodFailed("p", None, "Deleted", "the pod was deleted"))


CREATING: Pod = {
    "phase": "Pending",
    "containerStatuses": [{"state": {"waiting": {"reason": "ContainerCreating"}}}],
}


def event(uid: str, kind: str, reason: str, at: str, message: str) -> dict[str, Any]:
    return {
        "type": kind,
        "reason": reason,
        "message": message,
        "lastTimestamp": at,
        "involvedObject": {"kind": "Pod", "uid": uid},
    }


# A pod with init containers (a setup pod with `prepare`) waits so, each container of it.
INITIALIZING: Pod = {
    "phase": "Pending",
    "initContainerStatuses": [
        {"name": "prepare", "state": {"waiting": {"reason": "PodInitializing"}}}
    ],
    "containerStatuses": [{"state": {"waiting": {"reason": "PodInitializing"}}}],
}


@pytest.mark.parametrize("waiting", [CREATING, INITIALIZING], ids=["one-container", "init"])
def test_a_pod_stuck_creating_its_container_times_out_with_its_kubelet_s_warning(
    clock: FakeClock, waiting: Pod
) -> None:
    """A real kubelet says why a hostPath cannot be mounted only in a FailedMount event."""
    api = FakePodApi(clock, [[waiting]])
    failed_mount = (
        'MountVolume.SetUp failed for volume "base" : hostPath type check failed:'
        " /opt/absent is not a directory"
    )
    api.events = [
        event("uid-0", "Normal", "Scheduled", "2026-01-01T00:00:01Z", "assigned"),
        event("uid-0", "Warning", "FailedMount", "2026-01-01T00:00:02Z", "an older one"),
        event("uid-0", "Warning", "FailedMount", "2026-01-01T00:00:09Z", failed_mount),
        event("uid-9", "Warning", "BackOff", "2026-01-01T00:00:10Z", "another pod's"),
    ]
    with pytest.raises(HelperPodTimeout) as timeout:
        run(api, clock, timeout=30)
    reason = waiting["containerStatuses"][0]["state"]["waiting"]["reason"]
    assert str(timeout.value).endswith(
        f"(last seen: Pending, waiting: {reason}; FailedMount: {failed_mount})"
    )
    assert timeout.value.last_seen is not None


def test_a_pod_failed_at_its_deadline_before_its_container_existed_says_why(
    clock: FakeClock,
) -> None:
    """After its mount wait a real kubelet fails such a pod DeadlineExceeded, its container
    ContainerStatusUnknown: the report adds the FailedMount it recorded."""
    api = FakePodApi(clock, [[CREATING, UNMOUNTED]])
    api.events = [event("uid-0", "Warning", "FailedMount", "2026-01-01T00:02:00Z", "no /opt/x")]
    with pytest.raises(HelperPodFailed) as failure:
        run(api, clock, timeout=300)
    assert (failure.value.exit_code, failure.value.reason) == (None, "DeadlineExceeded")
    assert str(failure.value).endswith(
        "failed (DeadlineExceeded, no exit code): The container could not be located when the"
        " pod was terminated; FailedMount: no /opt/x"
    )


def test_without_its_events_a_pod_stuck_creating_times_out_saying_what_it_saw(
    clock: FakeClock,
) -> None:
    api = FakePodApi(clock, [[CREATING]])  # no right to read events: a 403
    with pytest.raises(HelperPodTimeout) as timeout:
        run(api, clock, timeout=30)
    assert str(timeout.value).endswith("(last seen: Pending, waiting: ContainerCreating)")


def test_an_image_pull_failure_is_reported_after_the_grace(clock: FakeClock) -> None:
    api = FakePodApi(clock, [[PULL_BACKOFF]])
    with pytest.raises(HelperPodNotStarted) as not_started:
        run(api, clock, timeout=120, grace=20)
    assert "ImagePullBackOff" in not_started.value.reason
    assert not_started.value.duration == pytest.approx(21)
    assert methods(api) == ["POST", "DELETE"]


def test_a_pull_failure_that_recovers_is_not_reported(clock: FakeClock) -> None:
    api = FakePodApi(clock, [[PULL_BACKOFF], [RUNNING], [SUCCEEDED]])
    assert run(api, clock, grace=20) == pytest.approx(3)


def test_a_pod_deleted_under_us_is_a_failure(clock: FakeClock) -> None:
    api = FakePodApi(clock, [[RUNNING, "DELETED"]])
    with pytest.raises(HelperPodFailed, match="deleted"):
        run(api, clock)


def test_an_expired_watch_rereads_the_pod(clock: FakeClock) -> None:
    api = FakePodApi(clock, [[ApiError(status=410, reason="Gone")], [SUCCEEDED]])
    run(api, clock)
    assert methods(api) == ["POST", "GET", "DELETE"]


def test_a_broken_watch_rereads_the_pod_after_a_pause(clock: FakeClock) -> None:
    api = FakePodApi(clock, [[OSError("connection reset")], [SUCCEEDED]])
    run(api, clock)
    assert methods(api) == ["POST", "GET", "DELETE"]
    assert clock.sleeps == [1.0]


def test_an_unreachable_api_is_ridden_out_until_it_answers(clock: FakeClock) -> None:
    api = FakePodApi(clock, [[OSError("connection refused")], [SUCCEEDED]])
    api.fail_reads = 1
    run(api, clock)
    assert methods(api) == ["POST", "GET", "DELETE"]


def test_create_errors_are_not_started(clock: FakeClock) -> None:
    api = FakePodApi(clock)
    api.forbid_create = True
    with pytest.raises(HelperPodNotStarted, match="HTTP 403"):
        run(api, clock)
    assert methods(api) == ["POST", "DELETE"]


def leave_pod(api: FakePodApi, annotation: str, status: Pod) -> None:
    pod = copy.deepcopy(MANIFEST)
    pod["metadata"]["annotations"] = {SPEC_HASH_ANNOTATION: annotation}
    pod["metadata"]["uid"] = "old-uid"
    pod["metadata"]["resourceVersion"] = "100"
    pod["status"] = status
    api.pods[pod["metadata"]["name"]] = pod


def test_a_leftover_pod_from_the_same_manifest_is_adopted(clock: FakeClock) -> None:
    api = FakePodApi(clock)
    leave_pod(api, spec_hash(MANIFEST), SUCCEEDED)
    assert run(api, clock) == 0
    assert methods(api) == ["POST", "GET", "DELETE"]


def test_an_adopted_running_pod_is_followed_to_its_end(clock: FakeClock) -> None:
    api = FakePodApi(clock, [[FAILED]])
    leave_pod(api, spec_hash(MANIFEST), RUNNING)
    with pytest.raises(HelperPodFailed):
        run(api, clock)
    assert api.watches[0]["resource_version"] == "100"


def test_a_leftover_pod_from_another_manifest_is_replaced(clock: FakeClock) -> None:
    api = FakePodApi(clock, [["DELETED"], [SUCCEEDED]])
    leave_pod(api, "another-manifest", RUNNING)
    run(api, clock)
    assert methods(api) == ["POST", "GET", "DELETE", "POST", "DELETE"]
    assert api.requests[2][2]["preconditions"] == {"uid": "old-uid"}


def test_an_earlier_pod_whose_deletion_went_unheard_is_looked_at_again(clock: FakeClock) -> None:
    """Its deletion came before the run began to follow it (the leftover collector deleted
    it): no event will say so, and a look at the pod itself does, within a second."""
    api = FakePodApi(clock, [[], [SUCCEEDED]])
    leave_pod(api, "another-manifest", SUCCEEDED)
    request_json = api.request_json

    def deleting_at_once(method: str, path: str, **options: Any) -> Any:
        answer = request_json(method, path, **options)
        if method == "DELETE" and path.endswith(MANIFEST["metadata"]["name"]):
            api.pods.pop(MANIFEST["metadata"]["name"], None)
        return answer

    api.request_json = deleting_at_once  # type: ignore[method-assign]
    started = clock.monotonic()
    run(api, clock)
    assert methods(api)[:5] == ["POST", "GET", "DELETE", "GET", "POST"]
    assert clock.monotonic() - started <= 2.0


def test_a_manifest_needs_a_name_and_namespace(clock: FakeClock) -> None:
    with pytest.raises(ValueError, match=r"metadata\.namespace"):
        run(FakePodApi(clock), clock, manifest={"metadata": {"name": "x"}})


def test_pod_state_reading() -> None:
    assert PodState.of({}).phase == "Pending"
    assert PodState.of({"status": FAILED}) == PodState(
        "Failed", 3, "Error", "mkdir: /data/x: Permission denied\n"
    )
    waiting = PodState.of({"status": PULL_BACKOFF})
    assert waiting.waiting_reason == "ImagePullBackOff"
    assert waiting.describe() == "Pending, waiting: ImagePullBackOff"


def test_spec_hash_ignores_key_order() -> None:
    reordered = {
        "spec": MANIFEST["spec"],
        "metadata": MANIFEST["metadata"],
        "kind": "Pod",
        "apiVersion": "v1",
    }
    assert spec_hash(reordered) == spec_hash(MANIFEST)
    changed = copy.deepcopy(MANIFEST)
    changed["spec"]["nodeName"] = "node-2"
    assert spec_hash(changed) != spec_hash(MANIFEST)


def test_pod_state_reads_the_init_container_the_pod_is_at() -> None:
    """A teardown pod runs the user's code in an init container: its failure, or its wait for
    an image, is the pod's state, not the main container's PodInitializing."""
    initializing = {"waiting": {"reason": "PodInitializing"}}
    failed_init = {
        "phase": "Failed",
        "initContainerStatuses": [
            {"state": {"terminated": {"exitCode": 2, "reason": "Error", "message": "rm: busy\n"}}}
        ],
        "containerStatuses": [{"state": initializing}],
    }
    assert PodState.of({"status": failed_init}) == PodState("Failed", 2, "Error", "rm: busy\n")
    pulling = {
        "phase": "Pending",
        "initContainerStatuses": [{"state": {"waiting": {"reason": "ImagePullBackOff"}}}],
        "containerStatuses": [{"state": initializing}],
    }
    assert PodState.of({"status": pulling}).waiting_reason == "ImagePullBackOff"
    main_failed = {
        "phase": "Failed",
        "initContainerStatuses": [{"state": {"terminated": {"exitCode": 0}}}],
        "containerStatuses": [
            {"state": {"terminated": {"exitCode": 1, "reason": "Error", "message": "left 2\n"}}}
        ],
    }
    assert PodState.of({"status": main_failed}) == PodState("Failed", 1, "Error", "left 2\n")


def runner(api: FakePodApi, clock: FakeClock, grace: float = 20.0) -> PodRunner:
    return PodRunner(cast(KubeClients, api), start_failure_grace=grace, clock=clock)


def test_a_run_to_its_end_returns_a_failed_pod_and_leaves_it_for_the_caller(
    clock: FakeClock,
) -> None:
    """A batch pod's containers report their own outcomes: the pod as it ended is returned,
    failed or not, and deleted only when the caller has read it."""
    api = FakePodApi(clock, [[RUNNING, FAILED]])
    helper = runner(api, clock)
    seconds, final = run_through(helper.follow_to_end(MANIFEST, 120))
    assert seconds == pytest.approx(2)
    assert final["status"] == FAILED
    assert methods(api) == ["POST"]
    helper.delete(MANIFEST)
    assert methods(api) == ["POST", "DELETE"]


def test_a_run_to_its_end_that_never_starts_keeps_the_pod_as_last_seen_and_deletes_it(
    clock: FakeClock,
) -> None:
    api = FakePodApi(clock, [[PULL_BACKOFF]])
    with pytest.raises(HelperPodNotStarted) as not_started:
        run_through(runner(api, clock).follow_to_end(MANIFEST, 120))
    last_seen = not_started.value.last_seen
    assert last_seen is not None and last_seen["status"] == PULL_BACKOFF
    assert methods(api) == ["POST", "DELETE"]
