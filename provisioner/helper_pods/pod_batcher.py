"""The helper runs of setups and teardowns, off the workers: a worker hands a volume over and
moves on; its run starts when `batch_planner` says (at once on a quiet node, in the node's next
batch pod on a busy one), on a thread of its own; when it ends, the volume's result is kept
until its key's next reconcile takes it, and the key is put on the loop's work queue again.

Never two helpers for one volume at once: a volume that a running pod we did not start serves
(a predecessor's, say, after a crash) waits until that pod is gone, and that pod is deleted so
that the wait is short (its volumes run again; setup and teardown are idempotent). The only
exception is a pod of the very name the volume's own pods have: the single-pod run adopts it,
as it always did.

A pod that never goes away (on an unreachable node, or kept Terminating by a finalizer) holds
its volumes only until `hold_timeout`: then a volume whose helper runs on that pod's node fails
with `HelperPodStuck` (a Warning event on its claim or PV; it is retried with backoff), and one
whose helper runs elsewhere (a shared-filesystem volume) stops waiting for it, with a Warning.
`liveness` reports runs and held volumes that outlived every bound, so that /healthz restarts a
process whose helper runs wedged.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, Generic, Protocol, TypeVar

from provisioner.configuration.config import ConfigBundle
from provisioner.helper_pods.batch_planner import BatchPlanner, Launch
from provisioner.helper_pods.batch_pod_shapes import (
    DEADLINE_SLACK_SECONDS,
    batch_pod_name,
    is_batchable,
)
from provisioner.helper_pods.pod_index import ServingPod
from provisioner.helper_pods.pod_runner import HelperPodError, never_ran
from provisioner.helper_pods.pod_runs import (
    BATCH_WAIT_MARGIN_SECONDS,
    BatchResults,
    PodRuns,
    RunResult,
)
from provisioner.helper_pods.pod_shapes import (
    HELPER_STEPS,
    HelperAction,
    HelperTarget,
    helper_pod_name,
)
from provisioner.kube.client import ObjectReference
from provisioner.provisioning.actions import ActionFailed
from provisioner.provisioning.base_path_checks import missing_base_path_hint
from provisioner.provisioning.removal_gate import RemovalPermit

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
K_contra = TypeVar("K_contra", bound=Hashable, contravariant=True)

RECHECK_SECONDS = 10.0
"""Volumes held for another pod are looked at again this often, in case an event got lost."""
DELETE_AGAIN_SECONDS = 30.0
DROPPED = RuntimeError("the helper run was dropped before it started (stopping)")
RUN_MARGIN_SECONDS = 120.0
"""Beyond the longest its pods may take, before a helper run counts as wedged (/healthz)."""


class HelperPodStuck(HelperPodError):  # noqa: N818 (reads as the others: HelperPodFailed, ...)
    """A pod we did not start, serving the volume, did not go away within the hold timeout."""

    def __init__(self, pod: str, seen: ServingPod, waited: float) -> None:
        super().__init__(
            pod,
            f"still {seen.state} on node {seen.node or '(none)'} {waited:.0f}s after the"
            " volume began to wait for it (it was asked to go): its node may be unreachable,"
            " or a finalizer keeps it; bring the node back, or remove the pod's finalizers"
            " (kubectl delete pod --force --grace-period=0 once nothing runs there)",
        )


class RunRefused(ActionFailed):
    """The last check before a helper pod is built said no (see `RunChecks`): nothing ran."""


class KeyQueue(Protocol[K_contra]):
    """The loop's work queue: a key whose helper run ended is put back on it, and its next
    reconcile takes the result (`take`). A queue the loop reads, not a call into it."""

    def add(self, item: K_contra) -> None: ...


class RunChecks(Protocol):
    """The path book's last look before a job's helper pod is built. It stays, though the
    decision to run was taken under the book's lock at hand-over: a job may queue or be held
    a while, and the book may have changed meanwhile (a teardown's PV came back in use, a
    provision's path was taken by a volume the informer showed since). Implemented by the
    book behind its lock; a query, it reports and changes nothing."""

    def helper_run_problem(self, volume_name: str, *, teardown: bool) -> str | None:
        """None, or why the volume's helper must not run now."""
        ...


class ServingPods(Protocol):
    """The helper pods serving a volume, as the helper-pod informer last showed them
    (`pod_index.HelperPodIndex`)."""

    def pods_serving(self, volume_name: str) -> dict[str, ServingPod]: ...


class WarningRecorder(Protocol):
    """Where a held volume that stopped waiting is reported (a Warning event)."""

    def warning(self, involved: ObjectReference, reason: str, message: str) -> None: ...


@dataclass(frozen=True)
class VolumeJob(Generic[K]):
    """One volume's helper run, for the work-queue key that handed it over."""

    key: K
    action: HelperAction
    target: HelperTarget
    bundle: ConfigBundle
    reference: ObjectReference | None = None
    """The claim or PV a Warning about this run is recorded on (HelperPodStuck)."""
    permit: RemovalPermit | None = None
    """The removal gate's permit: a teardown's (required), or a setup's clean-up after it
    failed (without it, a failed setup leaves its directory)."""


@dataclass(frozen=True)
class BatchSettings:
    max_batch: int = 12
    """Volumes in one batch pod, at most."""
    pods_per_node: int = 2
    """Helper pods running per node and action, at most (for volumes that may share a pod)."""
    max_single_pods: int = 8
    """Pods of their own running at once, for volumes that may not share one."""
    hold_timeout: float = 300.0
    """How long a volume waits for a pod we did not start to go away (see the module)."""


class PodBatcher(Generic[K]):
    def __init__(
        self,
        runs: PodRuns,
        settings: BatchSettings,
        *,
        queue: KeyQueue[K],
        serving: ServingPods,
        checks: RunChecks,
        recorder: WarningRecorder,
    ) -> None:
        """`serving`: the helper pods that serve a volume (a pod serving it that we did not
        start is deleted through `runs`); `checks`, asked just before a job's pod is built (it
        may have queued a while); `recorder`: where a held volume that stopped waiting is
        reported, on the job's `reference`."""
        self._runs = runs
        self._planner: BatchPlanner[VolumeJob[K]] = BatchPlanner(
            max_batch=settings.max_batch,
            pods_per_group=settings.pods_per_node,
            max_single_pods=settings.max_single_pods,
        )
        self._queue = queue
        self._serving = serving
        self._checks = checks
        self._recorder = recorder
        self._hold_timeout = settings.hold_timeout
        self._lock = threading.Condition()
        self._jobs: dict[K, VolumeJob[K]] = {}
        """Handed over and not yet ended (queued, held or running)."""
        self._held: dict[K, VolumeJob[K]] = {}
        """Waiting for another pod serving the same volume to be gone."""
        self._held_since: dict[K, float] = {}
        """When each volume began to wait (kept while it is looked at again)."""
        self._threads: dict[int, tuple[str, float, float]] = {}
        """Each helper run's thread: its name, when it started and how long it may take."""
        self._deleting: dict[str, float] = {}
        """Pods we asked to delete, and when (asked again after DELETE_AGAIN_SECONDS)."""
        self._generation = 0
        """Counts pod changes, so a volume is never held after the change that frees it."""
        self._recheck: threading.Timer | None = None
        self._results: dict[K, RunResult] = {}
        self._in_flight: dict[str, int] = {}
        """Pod names our runs may create, with how many runs may create each."""
        self._reported_early: dict[str, str] = {}
        """Volumes whose result came before their batch pod ended, with that pod's name: a
        next run of such a volume waits for that pod to end, as for any other pod."""
        self._running = 0
        self._stopped = False

    # -- what the workers call ---------------------------------------------------------------

    def submit(self, job: VolumeJob[K]) -> None:
        """Hand the volume over; its result comes back through `take` once its key is queued
        again."""
        with self._lock:
            if self._stopped:
                raise RuntimeError("the helper runs are stopping")
            if job.key in self._jobs or job.key in self._results:
                raise RuntimeError(f"{job.key} already has a helper run")
            self._jobs[job.key] = job
        self._place(job)

    def take(self, key: K) -> RunResult | None:
        """The key's result once its run ended (then forgotten); None while it has not."""
        with self._lock:
            if key in self._jobs:
                return None
            return self._results.pop(key, None) or RunResult(0.0, DROPPED)

    def in_flight_pods(self) -> set[str]:
        with self._lock:
            return set(self._in_flight)

    def pods_changed(self, gone: str | None = None) -> None:
        """A helper pod ended or went (`gone`, by name): volumes waiting for it may run now.
        Called from the informer's thread, so any API call it leads to is made on another."""
        with self._lock:
            self._generation += 1
            if gone is not None:
                self._deleting.pop(gone, None)
            held = list(self._held.values())
            self._held.clear()
        if held:
            threading.Thread(
                target=self._place_all, args=(held,), name="helper-held", daemon=True
            ).start()

    # -- stopping --------------------------------------------------------------------------------

    def stop(self) -> None:
        """Start nothing more; forget what has not started (whoever leads next redoes it)."""
        with self._lock:
            self._stopped = True
            dropped = self._planner.drop_queued() + list(self._held.values())
            self._held.clear()
            if self._recheck is not None:
                self._recheck.cancel()
            for job in dropped:
                self._jobs.pop(job.key, None)
                self._held_since.pop(job.key, None)

    def wait_idle(self, deadline: float) -> bool:
        """Until the running pods ended or `deadline` (monotonic); whether they all did."""
        with self._lock:
            return self._lock.wait_for(
                lambda: not self._running, max(0.0, deadline - time.monotonic())
            )

    def ended_keys(self) -> list[K]:
        """Keys whose result no reconcile has taken yet."""
        with self._lock:
            return list(self._results)

    # -- running ---------------------------------------------------------------------------------

    def _place(self, job: VolumeJob[K]) -> None:
        """Queue the job in the planner, or hold it while another pod serves its volume."""
        own = {helper_pod_name(step, job.target.volume_name) for step in HELPER_STEPS[job.action]}
        warning = ""
        while True:
            with self._lock:
                generation, in_flight = self._generation, set(self._in_flight)
                still_ours = self._reported_early.get(job.target.volume_name)
            others = self._others_serving(job.target.volume_name, in_flight, still_ours)
            blockers = sorted(set(others) - own)
            now = time.monotonic()
            launches: list[Launch[VolumeJob[K]]] = []
            stuck: HelperPodStuck | None = None
            with self._lock:
                if self._stopped:
                    self._jobs.pop(job.key, None)
                    self._held_since.pop(job.key, None)
                    return
                if blockers and generation != self._generation:
                    continue  # a pod changed while we looked: look again
                waited = now - self._held_since.get(job.key, now)
                if blockers and waited >= self._hold_timeout:
                    stuck, warning = _held_too_long(job, blockers, others, waited)
                    blockers = [] if stuck is None else blockers
                if stuck is not None:
                    to_delete = []
                    self._jobs.pop(job.key, None)
                    self._held_since.pop(job.key, None)
                    self._results[job.key] = _with_hint(job, RunResult(waited, stuck))
                elif blockers:
                    to_delete = self._hold(job, blockers, still_ours, now)
                else:
                    to_delete = []
                    self._held_since.pop(job.key, None)
                    alone = bool(others) or not is_batchable(job.action, job.target, job.bundle)
                    group = None if alone else (job.action, job.target.node_name or "")
                    launches = self._planner.submit(job, group, job.bundle)
                    self._claim_pods(launches)
            break
        for name in to_delete:
            log.info(
                "volume %s waits for helper pod %s, which we did not start: deleting it",
                job.target.volume_name,
                name,
            )
            self._runs.delete_pod(name)
        if stuck is not None:
            log.warning("volume %s: %s", job.target.volume_name, stuck)
            self._queue.add(job.key)
        if warning:
            log.warning("%s", warning)
            if job.reference is not None:
                self._recorder.warning(job.reference, "HelperPodStuck", warning)
        self._start(launches)

    def _hold(
        self, job: VolumeJob[K], blockers: list[str], still_ours: str | None, now: float
    ) -> list[str]:
        """Hold the job until the pods `blockers` are gone; which of them to delete now (those
        we did not start, not asked to go lately). Under the lock."""
        if still_ours in blockers and job.key not in self._held_since:
            log.info(
                "volume %s waits for its earlier batch pod %s to end",
                job.target.volume_name,
                still_ours,
            )
        self._held_since.setdefault(job.key, now)
        self._held[job.key] = job
        to_delete = [
            name
            for name in blockers
            if name != still_ours
            and now - self._deleting.get(name, -DELETE_AGAIN_SECONDS) >= DELETE_AGAIN_SECONDS
        ]
        self._deleting.update(dict.fromkeys(to_delete, now))
        self._schedule_recheck()
        return to_delete

    def _others_serving(
        self, volume: str, in_flight: set[str], still_ours: str | None
    ) -> dict[str, ServingPod]:
        """The running pods that serve the volume, but for our runs' own: those run nothing
        of it any more, except `still_ours`, the batch pod that reported it early."""
        return {
            name: pod
            for name, pod in self._serving.pods_serving(volume).items()
            if pod.running and (name not in in_flight or name == still_ours)
        }

    def _recheck_seconds(self) -> float:
        return min(RECHECK_SECONDS, max(1.0, self._hold_timeout / 2))

    def _schedule_recheck(self) -> None:
        """Held volumes are looked at again now and then, in case a deletion got lost or their
        wait ran out (under the lock)."""
        if self._recheck is None:
            self._recheck = threading.Timer(self._recheck_seconds(), self._recheck_held)
            self._recheck.daemon = True
            self._recheck.start()

    def _recheck_held(self) -> None:
        with self._lock:
            self._recheck = None
            held = list(self._held.values())
            self._held.clear()
        self._place_all(held)

    def _place_all(self, jobs: list[VolumeJob[K]]) -> None:
        for job in jobs:
            self._place(job)

    def _claim_pods(self, launches: list[Launch[VolumeJob[K]]]) -> None:
        """Mark the pods the launches may create as ours, before any exists (under the lock)."""
        for launch in launches:
            self._running += 1
            for name in _pod_names(launch):
                self._in_flight[name] = self._in_flight.get(name, 0) + 1

    def _start(self, launches: list[Launch[VolumeJob[K]]]) -> None:
        for launch in launches:
            first = launch.jobs[0]
            name = f"helper-{first.action}-{first.target.volume_name}"
            with self._lock:
                self._threads[id(launch)] = (name, time.monotonic(), _longest_run(launch))
            thread = threading.Thread(target=self._run, args=(launch,), name=name, daemon=True)
            thread.start()

    # -- liveness --------------------------------------------------------------------------------

    def counts(self) -> str:
        """The helper runs and held volumes, as /healthz shows them ("" when there are none)."""
        with self._lock:
            return self._counts() if self._threads or self._held else ""

    def _counts(self) -> str:
        return f"helper runs: {len(self._threads)} running, {len(self._held)} held"

    def liveness(self, now: float | None = None) -> str | None:
        """None while every helper run and held volume is within its bounds; otherwise which
        one outlived them (a wedged thread or recheck: the process needs a restart)."""
        now = time.monotonic() if now is None else now
        overdue = self._hold_timeout + 3 * self._recheck_seconds()
        with self._lock:
            for name, started, longest in sorted(self._threads.values()):
                if now - started > longest:
                    ran = now - started
                    return f"helper run {name} has run for {ran:.0f}s ({self._counts()})"
            for key in self._held:
                waited = now - self._held_since.get(key, now)
                if waited > overdue:
                    return f"{key} has been held for {waited:.0f}s ({self._counts()})"
        return None

    def _run(self, launch: Launch[VolumeJob[K]]) -> None:
        """Runs the launch's pod; its results are reported as they come in (a batch pod's
        settled volumes while it runs, the rest as soon as it ended, before it is deleted:
        nothing waits on that), its pod names released once it is gone."""
        early: set[str] = set()
        reported = False
        try:
            for batch in self._outcomes(launch):
                if batch.ended:
                    self._report(launch, batch.results, skip=early)
                    reported = True
                else:
                    early.update(batch.results)
                    self._report_early(launch, batch.results)
        except Exception as error:
            log.exception("running the helper of %s failed", _volume_names(launch))
            if not reported:
                failed = {job.target.volume_name: RunResult(0.0, error) for job in launch.jobs}
                self._report(launch, failed, skip=early)
                reported = True
        finally:
            if not reported:
                self._report(launch, {}, skip=early)
            self._release_pods(launch)
            with self._lock:
                self._threads.pop(id(launch), None)

    def _outcomes(self, launch: Launch[VolumeJob[K]]) -> Iterator[BatchResults]:
        """The launch's results as they come in: a refusal, a batch pod's, or the volume's own
        pods' (see `PodRuns`)."""
        refused = self._refusals(launch)
        if refused:
            yield BatchResults(refused, ended=True)
            return
        first = launch.jobs[0]
        if len(launch.jobs) > 1:
            targets = [job.target for job in launch.jobs]
            permits = {
                job.target.volume_name: job.permit for job in launch.jobs if job.permit is not None
            }
            yield from self._runs.run_batch(first.action, targets, first.bundle, permits=permits)
            return
        try:
            seconds = self._runs.run(first.action, first.target, first.bundle, first.permit)
        except HelperPodError as error:
            result = RunResult(error.duration or 0.0, error)
        else:
            result = RunResult(seconds)
        yield BatchResults({first.target.volume_name: result}, ended=True)

    def _refusals(self, launch: Launch[VolumeJob[K]]) -> dict[str, RunResult]:
        """Each volume's result when any job of the launch may not run: the refused ones say
        why, the others that they were not run for it (they are retried). A refusal is rare
        (the book changed while the job queued), so the batch is not rebuilt without it."""
        reasons = {
            job.target.volume_name: self._checks.helper_run_problem(
                job.target.volume_name, teardown=job.action == "delete"
            )
            for job in launch.jobs
        }
        problems = [reason for reason in reasons.values() if reason is not None]
        if not problems:
            return {}
        log.warning("not starting the helper run of %s: %s", _volume_names(launch), problems[0])
        return {
            name: RunResult(
                0.0,
                RunRefused(reason or f"not run: its batch was refused ({problems[0]})"),
            )
            for name, reason in reasons.items()
        }

    def _report_early(self, launch: Launch[VolumeJob[K]], results: Mapping[str, RunResult]) -> None:
        """Some volumes of a running batch pod are done: their keys take their results now
        (their PVs need not wait for the pod's last volume); the pod keeps its slot."""
        jobs = [job for job in launch.jobs if job.target.volume_name in results]
        (pod,) = _pod_names(launch)
        with self._lock:
            for job in jobs:
                self._jobs.pop(job.key, None)
                self._results[job.key] = _with_hint(job, results[job.target.volume_name])
                self._reported_early[job.target.volume_name] = pod
        for job in jobs:
            self._queue.add(job.key)

    def _report(
        self,
        launch: Launch[VolumeJob[K]],
        results: Mapping[str, RunResult],
        skip: set[str] | frozenset[str] = frozenset(),
    ) -> None:
        """The launch's results are in (but for the volumes in `skip`, reported early): kept
        for their keys, which are queued again; its slot goes to what waits."""
        missing = RuntimeError("the helper run ended without a result")
        jobs = [job for job in launch.jobs if job.target.volume_name not in skip]
        with self._lock:
            for name in skip:
                self._reported_early.pop(name, None)
            # A next run of a volume reported early may wait for this pod: it ended.
            held = [job for job in self._held.values() if job.target.volume_name in skip]
            for job in held:
                del self._held[job.key]
            for job in jobs:
                self._jobs.pop(job.key, None)
                result = results.get(job.target.volume_name) or RunResult(0.0, missing)
                self._results[job.key] = _with_hint(job, result)
            self._running -= 1
            started = [] if self._stopped else self._planner.finished(launch)
            self._claim_pods(started)
            self._lock.notify_all()
        for job in jobs:
            self._queue.add(job.key)
        self._start(started)
        self._place_all(held)

    def _release_pods(self, launch: Launch[VolumeJob[K]]) -> None:
        """The launch's pods are deleted: their names are no longer ours to follow."""
        with self._lock:
            for name in _pod_names(launch):
                self._in_flight[name] -= 1
                if not self._in_flight[name]:
                    del self._in_flight[name]
            self._lock.notify_all()


def _volume_names(launch: Launch[VolumeJob[Any]]) -> str:
    return ", ".join(job.target.volume_name for job in launch.jobs)


def _held_too_long(
    job: VolumeJob[Any], blockers: list[str], others: Mapping[str, ServingPod], waited: float
) -> tuple[HelperPodStuck | None, str]:
    """What a volume that waited its hold timeout does: fail, when a pod it waits for runs on
    the node its helper runs on; else stop waiting, with a warning. Only a shared-filesystem
    volume's pods run on other nodes, and a pod stuck on one of them does not stop its helper
    from running here."""
    here = [name for name in blockers if others[name].node == job.target.node_name]
    if here:
        return HelperPodStuck(here[0], others[here[0]], waited), ""
    pods = "; ".join(f"{name}: {others[name].state} on {others[name].node}" for name in blockers)
    return None, (
        f"stopped waiting for the helper pods of volume {job.target.volume_name} after"
        f" {waited:.0f}s ({pods}): its helper runs on another node"
    )


def _longest_run(launch: Launch[VolumeJob[Any]]) -> float:
    """The longest a launch's run may take: each volume's timeout per step (or the batch
    pod's deadline and the wait past it), and a margin."""
    first = launch.jobs[0]
    timeout = float(first.bundle.config.cmd_timeout_seconds)
    steps = len(launch.jobs) if len(launch.jobs) > 1 else len(HELPER_STEPS[first.action]) + 1
    slack = DEADLINE_SLACK_SECONDS + BATCH_WAIT_MARGIN_SECONDS
    return timeout * steps + slack + RUN_MARGIN_SECONDS


def _pod_names(launch: Launch[VolumeJob[Any]]) -> list[str]:
    """The pods a launch may create: the batch pod, or the volume's own pods."""
    first = launch.jobs[0]
    if len(launch.jobs) > 1:
        return [batch_pod_name(first.action, [job.target.volume_name for job in launch.jobs])]
    return [helper_pod_name(step, first.target.volume_name) for step in HELPER_STEPS[first.action]]


def _with_hint(job: VolumeJob[Any], result: RunResult) -> RunResult:
    """A setup whose helper never ran most likely waited for a base path that is missing and
    may not be made: its result says so, here where the volume's base path and rules are
    known, so the claim's Warning needs nothing more than the result."""
    error = result.error
    if job.action != "create" or not isinstance(error, HelperPodError) or not never_ran(error):
        return result
    target = job.target
    rules = job.bundle.config.base_path_rules(target.base_path)
    where = target.node_name or "the shared filesystem"
    return replace(result, hint=missing_base_path_hint(target.base_path, where, rules))
