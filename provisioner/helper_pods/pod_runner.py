"""Running a helper pod to completion: create, watch, report, always delete.

rancher polls the pod every second and only recognises Succeeded, so a failing script is noticed
at the timeout. Here the pod is watched (a watch on its name, re-opened when the server ends it)
and every outcome is reported as soon as the pod shows it:

- Succeeded: return the duration;
- Failed: `HelperPodFailed` with the exit code, reason and the log tail the kubelet copied into
  the termination message (the helper uses terminationMessagePolicy FallbackToLogsOnError);
- stuck before starting (image pull, bad config) for longer than a short grace:
  `HelperPodNotStarted`;
- nothing of that within the timeout: `HelperPodTimeout`.

A pod of the same name left by an earlier run (one whose creation was answered too late, say;
a new leader deletes what its predecessor left before it runs anything) is adopted when it was
made from the same manifest (compared by a hash annotation), else replaced.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import math
import threading
import time
from collections.abc import Generator, Mapping
from http import HTTPStatus
from typing import Any, cast

from urllib3.exceptions import HTTPError

from provisioner.helper_pods.pod_deletions import PodDeletions
from provisioner.helper_pods.pod_events import PodEventHub
from provisioner.helper_pods.pod_outcomes import (
    HelperPodError,
    HelperPodFailed,
    HelperPodNotStarted,
    HelperPodTimeout,
    PodProgress,
    PodState,
    never_ran,
)
from provisioner.kube import watch_stream
from provisioner.kube.api_error import ApiError, describe_api_error
from provisioner.kube.client import KubeClients
from provisioner.kube.clock import SYSTEM_CLOCK, Clock

__all__ = [
    "SPEC_HASH_ANNOTATION",
    "HelperPodError",
    "HelperPodFailed",
    "HelperPodNotStarted",
    "HelperPodTimeout",
    "PodRunner",
    "PodState",
    "PodStates",
    "never_ran",
    "run_through",
    "spec_hash",
]

log = logging.getLogger(__name__)

SPEC_HASH_ANNOTATION = "local-path-storage.io/helper-pod-spec-hash"
DEFAULT_START_FAILURE_GRACE = 20.0
DELETION_RECHECK_SECONDS = 1.0
"""How often a run waiting for an earlier pod of its name to go reads that pod again."""
CONNECT_TIMEOUT = 10.0
CREATING_REASONS = frozenset({"ContainerCreating", "PodInitializing"})
"""A container's waiting reason before its pod's volumes are mounted: a kubelet says
PodInitializing, not ContainerCreating, for every container of a pod with init containers."""
"""A container's waiting reason while its kubelet sets up the pod (its volumes, say)."""
KUBELET_SYNC_MARGIN_SECONDS = 5.0
"""How long past a pod's own deadline and grace its run waits for the kubelet to report it."""
DEFAULT_GRACE_SECONDS = 30.0
"""Kubernetes' terminationGracePeriodSeconds when a pod sets none."""


def kubelet_deadline_wait(deadline: float, grace: float) -> float:
    """How long after its creation a pod with `activeDeadlineSeconds` `deadline` and
    `terminationGracePeriodSeconds` `grace` may still be running before its kubelet has
    reported it ended. A kubelet counts the deadline from the pod's start on the node, acts on
    it at its next sync of the pod and reports the pod Failed (DeadlineExceeded) only once its
    containers stopped, after their grace."""
    return deadline + grace + KUBELET_SYNC_MARGIN_SECONDS


def run_timeout(manifest: Mapping[str, Any], timeout: float) -> float:
    """How long a run of `manifest` waits: `timeout`, and for a pod with its own deadline (every
    helper pod) at least until the kubelet has enforced it. Waiting only the deadline, the run
    gave up first, deleted the pod and reported only that it still ran, never the kubelet's
    verdict nor the script's output."""
    spec = manifest.get("spec") or {}
    own = spec.get("activeDeadlineSeconds")
    if own is None:
        return timeout
    grace = float(spec.get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS))
    return max(timeout, kubelet_deadline_wait(float(own), grace))


def spec_hash(manifest: Mapping[str, Any]) -> str:
    """A digest of the manifest as we were asked to create it."""
    canonical = json.dumps(manifest, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


PodStates = Generator[dict[str, Any], None, tuple[float, dict[str, Any]]]
"""A helper pod's run as it is followed: each state of the pod seen, then its seconds and the
pod as last seen."""


def run_through(states: PodStates) -> tuple[float, dict[str, Any]]:
    """A followed run to its end: its seconds and the pod as last seen."""
    while True:
        try:
            next(states)
        except StopIteration as end:
            seconds, final = end.value
            return float(seconds), dict(final)


class _PodGoneError(Exception):
    pass


class PodRunner:
    def __init__(
        self,
        clients: KubeClients,
        *,
        start_failure_grace: float = DEFAULT_START_FAILURE_GRACE,
        clock: Clock = SYSTEM_CLOCK,
        pod_events: PodEventHub | None = None,
    ) -> None:
        """With `pod_events` (fed by an informer on the helper pods), runs follow their pod from
        that shared watch instead of opening one each."""
        self._clients = clients
        self._grace = start_failure_grace
        self._clock = clock
        self._pod_events = pod_events
        self._creations = threading.Condition()
        self._closed = False
        self._creating = 0
        self._deletions = PodDeletions(clients)

    def run(self, manifest: Mapping[str, Any], timeout: float) -> float:
        """Create the pod (namespace and name from its metadata), wait for it to succeed, delete
        it. Returns the seconds it took; raises a `HelperPodError` otherwise (the pod is deleted
        in every case). API errors while following the pod are ridden out until the timeout."""
        return self.run_for_message(manifest, timeout)[0]

    def run_for_message(self, manifest: Mapping[str, Any], timeout: float) -> tuple[float, str]:
        """As `run`, and also the termination message the succeeded container left (what a
        helper that reports a result writes to its terminationMessagePath)."""
        seconds, final = run_through(self._run(manifest, timeout, failed_ends=False))
        return seconds, PodState.of(final).message

    def follow_to_end(self, manifest: Mapping[str, Any], timeout: float) -> PodStates:
        """As `run`, for a pod whose containers report their own outcomes (a batch pod): yields
        each state of the pod seen on the way (its containers' outcomes as they end), and
        returns its seconds and the pod as last seen once it succeeded or failed, not deleted
        yet: the caller reports its outcomes first, then calls `delete` (on any error, or when
        the caller stops following, it is deleted here). Raises `HelperPodNotStarted` or
        `HelperPodTimeout` (with the pod as last seen) and `HelperPodFailed` only when the pod
        was deleted before it ended."""
        return self._run(manifest, timeout, failed_ends=True, keep=True)

    def delete(self, manifest: Mapping[str, Any]) -> None:
        """Delete the pod a `follow_to_end` left (NotFound is fine)."""
        metadata = manifest["metadata"]
        self.delete_until_gone(metadata["namespace"], metadata["name"])

    def _run(
        self,
        manifest: Mapping[str, Any],
        timeout: float,
        *,
        failed_ends: bool,
        keep: bool = False,
    ) -> PodStates:
        started = self._clock.monotonic()
        timeout = run_timeout(manifest, timeout)
        deadline = started + timeout
        pod = copy.deepcopy(dict(manifest))
        metadata = pod.setdefault("metadata", {})
        namespace, name = metadata.get("namespace"), metadata.get("name")
        if not namespace or not name:
            raise ValueError("a helper pod manifest needs metadata.namespace and metadata.name")
        metadata.setdefault("annotations", {})[SPEC_HASH_ANNOTATION] = spec_hash(manifest)
        label = f"{namespace}/{name}"
        ended = False
        try:
            current = self._create_or_adopt(pod, label, deadline, timeout)
            final = yield from self._states_until_done(
                current, label, deadline, timeout, failed_ends=failed_ends
            )
            ended = True
            return self._clock.monotonic() - started, final
        except HelperPodError as e:
            e.duration = self._clock.monotonic() - started
            raise
        finally:
            if not (keep and ended):
                self.delete_until_gone(namespace, name)

    def _create_or_adopt(
        self, pod: dict[str, Any], label: str, deadline: float, timeout: float
    ) -> dict[str, Any]:
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        wanted = pod["metadata"]["annotations"][SPEC_HASH_ANNOTATION]
        for _ in range(3):
            try:
                return self._create(pod, label)
            except ApiError as e:
                if e.status != HTTPStatus.CONFLICT:
                    raise HelperPodNotStarted(
                        label, f"creating it failed: {describe_api_error(e)}"
                    ) from e
            except (HTTPError, OSError) as e:
                raise HelperPodNotStarted(label, f"creating it failed: {e}") from e
            try:
                existing = self._clients.request_json("GET", _pods(namespace, name))
            except ApiError as e:
                if e.status == HTTPStatus.NOT_FOUND:
                    continue
                raise HelperPodNotStarted(
                    label, f"reading it failed: {describe_api_error(e)}"
                ) from e
            except (HTTPError, OSError) as e:
                raise HelperPodNotStarted(label, f"reading it failed: {e}") from e
            existing_metadata = existing.get("metadata") or {}
            deleting = bool(existing_metadata.get("deletionTimestamp"))
            if (existing_metadata.get("annotations") or {}).get(SPEC_HASH_ANNOTATION) == wanted:
                if not deleting:
                    log.info("adopting helper pod %s left by an earlier run", label)
                    return existing
            elif not deleting:
                log.info("replacing helper pod %s: it was made from a different manifest", label)
                self.delete_until_gone(namespace, name, uid=existing_metadata.get("uid"))
            self._wait_until_deleted(existing, label, deadline, timeout)
        raise HelperPodNotStarted(label, "a pod of that name keeps reappearing")

    def _create(self, pod: dict[str, Any], label: str) -> dict[str, Any]:
        """POST the pod, unless the runner is closed: a stop must know every pod sent."""
        with self._creations:
            if self._closed:
                raise HelperPodNotStarted(label, "not created: the provisioner is stopping")
            self._creating += 1
        try:
            made = self._clients.request_json("POST", _pods(pod["metadata"]["namespace"]), body=pod)
        finally:
            with self._creations:
                self._creating -= 1
                self._creations.notify_all()
                closed = self._closed
        if closed:
            # The stop may have looked at the helper pods before this answer came: the run
            # deletes it itself (`_run`), not the next leader.
            raise HelperPodNotStarted(label, "created as the provisioner stopped: deleting it")
        return made

    def close(self, deadline: float) -> bool:
        """At a stop: no helper pod is created after this. Waits until the creations already
        sent have been answered (or `deadline`, monotonic), so that a look at the helper pods
        afterwards sees every pod this process made. Whether none was left unanswered. A failed
        deletion is not tried again after this: the stop deletes every helper pod itself."""
        with self._creations:
            self._closed = True
            self._deletions.close()
            return self._creations.wait_for(
                lambda: not self._creating, max(0.0, deadline - time.monotonic())
            )

    def _states_until_done(
        self,
        pod: dict[str, Any],
        label: str,
        deadline: float,
        timeout: float,
        *,
        failed_ends: bool = False,
    ) -> Generator[dict[str, Any], None, dict[str, Any]]:
        """Each state of the pod seen; returns the pod as last seen, once it succeeded (or,
        with `failed_ends`, failed)."""
        progress = PodProgress(label, deadline, timeout, self._grace, self._clock)

        def next_look(seen: dict[str, Any]) -> float | None:
            if failed_ends and PodState.of(seen).phase == "Failed":
                return None
            return progress.next_look(seen)

        try:
            yield pod
            wake_at = next_look(pod)
            while wake_at is not None:
                # Follow the watch while the pod's changes do not move the next look earlier
                # (a start failure's grace ending before the overall deadline).
                states = self._follow(pod, wake_at)
                try:
                    while True:
                        try:
                            pod = next(states)
                        except StopIteration as end:
                            pod = end.value
                            break
                        yield pod
                        following = next_look(pod)
                        if following is None or following < wake_at:
                            break
                except _PodGoneError as e:
                    raise HelperPodFailed(
                        label, None, "Deleted", "the pod was deleted before it finished"
                    ) from e
                finally:
                    states.close()
                yield pod
                wake_at = next_look(pod)
        except HelperPodError as error:
            said = self._with_kubelet_warning(error, pod, label)
            said.last_seen = pod
            if said is error:
                raise
            raise said from error
        return pod

    def _with_kubelet_warning(
        self, error: HelperPodError, pod: Mapping[str, Any], label: str
    ) -> HelperPodError:
        """`error` with the kubelet's newest Warning event on the pod added, for a pod whose
        container was never created (still waiting in ContainerCreating, or failed at its
        deadline before it was): why (a hostPath it cannot mount, say) is only in such an
        event. Else, or with no such event to be read, `error` itself."""
        creating = PodState.of(pod).waiting_reason in CREATING_REASONS
        if not (isinstance(error, HelperPodTimeout) and creating) and not (
            isinstance(error, HelperPodFailed) and never_ran(error)
        ):
            return error
        warning = self._kubelet_warning(pod)
        if not warning:
            return error
        if isinstance(error, HelperPodTimeout):
            return HelperPodTimeout(label, error.timeout, f"{error.last_state}; {warning}")
        assert isinstance(error, HelperPodFailed)
        said = "; ".join(part for part in (error.log_tail.strip(), warning) if part)
        return HelperPodFailed(
            label, error.exit_code, error.reason, said, container=error.container
        )

    def _kubelet_warning(self, pod: Mapping[str, Any]) -> str:
        """The newest Warning event on the pod as `reason: message` (a kubelet's FailedMount:
        `hostPath type check failed: ... is not a directory`), "" when none or unreadable."""
        metadata = pod.get("metadata") or {}
        path = f"/api/v1/namespaces/{metadata.get('namespace')}/events"
        selector = f"involvedObject.uid={metadata.get('uid')}"
        try:
            listed = self._clients.request_json("GET", path, query={"fieldSelector": selector})
        except (ApiError, HTTPError, OSError) as e:
            log.debug("reading the events of helper pod %s: %s", metadata.get("name"), e)
            return ""
        warnings = [event for event in listed.get("items") or () if event.get("type") == "Warning"]
        if not warnings:
            return ""
        newest = max(warnings, key=_event_time)
        return f"{newest.get('reason', '')}: {str(newest.get('message', '')).strip()}"

    def _wait_until_deleted(
        self, pod: dict[str, Any], label: str, deadline: float, timeout: float
    ) -> None:
        uid = pod["metadata"].get("uid")
        while self._clock.monotonic() < deadline:
            # A look at the pod itself at least every DELETION_RECHECK_SECONDS: its deletion
            # may have been heard before we began to follow it (another run's, or the leftover
            # collector's), and then no event says it again.
            window = min(deadline, self._clock.monotonic() + DELETION_RECHECK_SECONDS)
            states = self._follow(pod, window)
            try:
                while pod["metadata"].get("uid") == uid:
                    try:
                        pod = next(states)
                    except StopIteration as end:
                        pod = end.value
                        break
                if pod["metadata"].get("uid") == uid:
                    pod = self._reread(pod)
            except _PodGoneError:
                return
            finally:
                states.close()
            if pod["metadata"].get("uid") != uid:
                return
        raise HelperPodTimeout(label, timeout, "an earlier pod of that name was still deleting")

    def _follow(
        self, pod: dict[str, Any], until: float
    ) -> Generator[dict[str, Any], None, dict[str, Any]]:
        """Yields each new state of the pod until `until` (the caller stops following when it
        has seen enough); returns the last state seen, re-read when the watch broke. Raises
        _PodGoneError if it is deleted."""
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        events = (
            self._watch(namespace, name, watch_stream.resource_version_of(pod), until)
            if self._pod_events is None
            else self._pod_events.follow(pod, until)
        )
        try:
            for event in events:
                if event["type"] == "DELETED":
                    raise _PodGoneError
                if event["type"] == "BOOKMARK":
                    version = watch_stream.resource_version_of(event["object"])
                    pod["metadata"]["resourceVersion"] = version or pod["metadata"].get(
                        "resourceVersion"
                    )
                elif event["type"] in ("ADDED", "MODIFIED"):
                    pod = dict(event["object"])
                    yield pod
        except _ExpiredError:
            return self._reread(pod)
        except (HTTPError, OSError, ApiError) as e:
            log.warning("watching helper pod %s/%s: %s; re-reading it", namespace, name, e)
            self._clock.sleep(1.0)
            return self._reread(pod)
        finally:
            events.close()
        return pod

    def _watch(
        self, namespace: str, name: str, resource_version: str, until: float
    ) -> Generator[dict[str, Any]]:
        seconds = max(1, math.ceil(until - self._clock.monotonic()))
        try:
            response = cast(
                watch_stream.RawResponse,
                self._clients.list_function(_pods(namespace))(
                    field_selector=f"metadata.name={name}",
                    watch=True,
                    resource_version=resource_version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=seconds,
                    _preload_content=False,
                    _request_timeout=(CONNECT_TIMEOUT, seconds + 15),
                ),
            )
        except ApiError as e:
            if e.status == HTTPStatus.GONE:
                raise _ExpiredError from e
            raise
        try:
            for event in watch_stream.iter_watch_events(response):
                if event.get("type") == "ERROR":
                    if watch_stream.watch_error_code(event) == HTTPStatus.GONE:
                        raise _ExpiredError
                    raise HTTPError(f"watch error: {event.get('object')}")
                yield event
        finally:
            watch_stream.discard(response)

    def _reread(self, pod: dict[str, Any]) -> dict[str, Any]:
        """The pod as it is now; if the API cannot say (say, it is restarting), the state we
        last saw, so the caller's deadline decides how long to keep trying."""
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        try:
            return self._clients.request_json("GET", _pods(namespace, name))
        except ApiError as e:
            if e.status == HTTPStatus.NOT_FOUND:
                raise _PodGoneError from e
            log.warning("reading helper pod %s/%s: %s", namespace, name, describe_api_error(e))
        except (HTTPError, OSError) as e:
            log.warning("reading helper pod %s/%s: %s", namespace, name, e)
        return pod

    def list_pods(self, namespace: str, selector: str, *, timeout: float) -> list[dict[str, Any]]:
        """The pods of `namespace` that the label `selector` picks; raises `ApiError`,
        `HTTPError` or `OSError` when the API cannot say."""
        listed = self._clients.request_json(
            "GET", _pods(namespace), query={"labelSelector": selector}, timeout=timeout
        )
        return list(listed.get("items") or [])

    def delete_by_name(self, namespace: str, name: str, *, timeout: float = 30.0) -> None:
        """Delete a helper pod no run of ours follows (one we did not start, a leftover, one
        still running at a stop); NotFound is fine, any other failure is logged."""
        try:
            self._clients.request_json("DELETE", _pods(namespace, name), timeout=timeout)
        except ApiError as error:
            if error.status != HTTPStatus.NOT_FOUND:
                log.warning("deleting helper pod %s: %s %s", name, error.status, error.reason)
        except (HTTPError, OSError) as error:
            log.warning("deleting helper pod %s: %s", name, error)

    def delete_until_gone(self, namespace: str, name: str, uid: str | None = None) -> None:
        """Delete the pod (only the one of `uid`, if given), tried again in the background
        until the server took it (see `PodDeletions`): the caller does not wait for an API
        server that is restarting."""
        self._deletions.delete(namespace, name, uid)


class _ExpiredError(Exception):
    pass


def _event_time(event: Mapping[str, Any]) -> str:
    """When an event last happened, as its RFC 3339 text (which sorts in time order)."""
    return str(event.get("lastTimestamp") or event.get("eventTime") or "")


def _pods(namespace: str, name: str = "") -> str:
    path = f"/api/v1/namespaces/{namespace}/pods"
    return f"{path}/{name}" if name else path
