"""Running the helper pods of setups and teardowns: a volume's own pod (its steps in sequence)
or one batch pod for several volumes of a node, each volume's result reported on its own, with
the helper-pod metrics per volume."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from provisioner.configuration.config import ConfigBundle
from provisioner.helper_pods.batch_outcomes import batch_outcomes, settled_before_the_end
from provisioner.helper_pods.batch_pod_shapes import (
    VolumePartError,
    batch_pod_name,
    build_batch_helper_pod,
)
from provisioner.helper_pods.clone_step import build_action_pod
from provisioner.helper_pods.pod_runner import (
    HelperPodError,
    HelperPodFailed,
    PodRunner,
    PodState,
)
from provisioner.helper_pods.pod_shapes import (
    HELPER_POD_SELECTOR,
    PREPARE_CONTAINER,
    HelperAction,
    HelperTarget,
    build_helper_pod,
)
from provisioner.helper_pods.resize import build_resize_helper_pod
from provisioner.kube.metrics import Metrics
from provisioner.provisioning.expansion import Expand
from provisioner.provisioning.removal_gate import RemovalPermit
from provisioner.scans.node_scripts import build_presence_pod

log = logging.getLogger(__name__)

BATCH_WAIT_MARGIN_SECONDS = 30.0
"""How long past a batch pod's activeDeadlineSeconds its run waits for the kubelet to end it."""


@dataclass
class PodSettings:
    namespace: str
    service_account: str


class HelperPodNotBuilt(HelperPodError):  # noqa: N818 (reads as the others: HelperPodFailed)
    """A volume's part of a batch pod could not be built: it failed alone, before any pod."""

    def __init__(self, pod: str, error: VolumePartError) -> None:
        super().__init__(pod, f"not created: {error}")


@dataclass(frozen=True)
class RunResult:
    """How one volume's helper run ended: its seconds and, unless it succeeded, why not (a
    `HelperPodError`, or what else went wrong running it)."""

    seconds: float
    error: Exception | None = None
    hint: str = ""
    """What the failure most likely means, said after it: set by the batcher, which knows the
    volume's base path and its rules (a setup's helper that never ran: its base path missing)."""


@dataclass(frozen=True)
class BatchResults:
    """Volumes of a batch run whose results are in: while its pod runs, those it already
    settled (`ended` False; the pod keeps running), then, once, the rest (`ended` True)."""

    results: dict[str, RunResult]
    ended: bool


class PodRuns:
    def __init__(self, runner: PodRunner, metrics: Metrics, helper: PodSettings) -> None:
        self._runner = runner
        self._metrics = metrics
        self._helper = helper

    def run(
        self,
        action: HelperAction,
        target: HelperTarget,
        bundle: ConfigBundle,
        permit: RemovalPermit | None,
    ) -> float:
        """The volume's own pod, its steps one after another; raises `HelperPodError` when
        it fails. `permit`: the removal gate's, for a teardown (required) or for the clean-up
        after a failed setup (without it, a failed setup leaves its directory)."""
        manifest = build_action_pod(
            action,
            target,
            bundle,
            self._helper.namespace,
            self._helper.service_account,
            permit=permit,
        )
        try:
            seconds = self._runner.run(manifest, float(bundle.config.cmd_timeout_seconds))
        except HelperPodError as error:
            self._metrics.observe_helper_pod(action, "failed", error.duration or 0.0)
            # Not after `prepare`: it made nothing this attempt can call its own.
            failed_setup = (
                action == "create"
                and isinstance(error, HelperPodFailed)
                and error.container != PREPARE_CONTAINER
            )
            if failed_setup and permit is not None:
                self._remove_empty_directory(target, bundle, permit)
            raise
        self._metrics.observe_helper_pod(action, "succeeded", seconds)
        return seconds

    def _remove_empty_directory(
        self, target: HelperTarget, bundle: ConfigBundle, permit: RemovalPermit
    ) -> None:
        """A setup (or a clone's copy, which empties it when it fails) that ran and failed
        leaves no directory made for it: the `finish` step removes it if it is empty (a retry
        makes it again). One whose image never started is not followed by another pod of that
        image."""
        try:
            self.finish(target, bundle, permit)
        except HelperPodError as error:
            log.warning("removing %s after its failed setup: %s", target.path, error)

    def finish(self, target: HelperTarget, bundle: ConfigBundle, permit: RemovalPermit) -> None:
        """The fixed `finish` step alone, in the volume's own pod: the directory removed if
        empty and its owner marker says what the permit asks; raises `HelperPodError` when it
        is left."""
        manifest = build_helper_pod(
            "finish",
            target,
            bundle,
            self._helper.namespace,
            self._helper.service_account,
            permit=permit,
        )
        self._runner.run(manifest, float(bundle.config.cmd_timeout_seconds))

    def close(self, deadline: float) -> bool:
        """At a stop: no helper pod is created after this (see `PodRunner.close`)."""
        return self._runner.close(deadline)

    def helper_pods(self, *, timeout: float) -> list[dict[str, Any]]:
        """Every helper pod of our namespace, as the API has them now (see
        `PodRunner.list_pods`)."""
        return self._runner.list_pods(self._helper.namespace, HELPER_POD_SELECTOR, timeout=timeout)

    def delete_left_pod(self, name: str, uid: str) -> None:
        """Delete a helper pod of our namespace that an earlier leader left, that one only (by
        its UID), tried again until the server took it (see `PodRunner.delete_until_gone`)."""
        self._runner.delete_until_gone(self._helper.namespace, name, uid)

    def delete_pod(self, name: str, *, timeout: float = 30.0) -> None:
        """Delete a helper pod of our namespace by name (see `PodRunner.delete_by_name`)."""
        self._runner.delete_by_name(self._helper.namespace, name, timeout=timeout)

    def raise_quota(self, expansion: Expand, bundle: ConfigBundle) -> None:
        """Raise the volume's hard quota to the new size before the API objects say it is
        granted: a helper on the node does it where the filesystem enforces project quotas and
        does nothing elsewhere (its message says which). Raises `HelperPodError`."""
        if not expansion.base_path:
            log.info(
                "volume %s: no configured base path holds %s; no quota to raise",
                expansion.volume_name,
                expansion.path,
            )
            return
        manifest = build_resize_helper_pod(
            expansion,
            expansion.size_bytes,
            bundle,
            self._helper.namespace,
            self._helper.service_account,
        )
        timeout = float(bundle.config.cmd_timeout_seconds)
        try:
            seconds, message = self._runner.run_for_message(manifest, timeout)
        except HelperPodError as error:
            self._metrics.observe_helper_pod("resize", "failed", error.duration or 0.0)
            raise
        self._metrics.observe_helper_pod("resize", "succeeded", seconds)
        log.info("volume %s: %s", expansion.volume_name, message.strip() or "resized")

    def directory_gone(self, target: HelperTarget, bundle: ConfigBundle) -> bool:
        """Whether the volume's directory is gone, by a read-only look through its base path
        (asked only after a teardown pod that never started: nothing on the common path).
        Raises `HelperPodError` when the look failed or refused (nothing is proven): through
        a declared mount point with no filesystem mounted, the directory would only seem
        gone (node_scripts.PRESENCE_SCRIPT)."""
        manifest = build_presence_pod(
            bundle,
            self._helper.namespace,
            self._helper.service_account,
            node=target.node_name,
            base_path=target.base_path,
            path=target.path,
        )
        _, message = self._runner.run_for_message(
            manifest, float(bundle.config.cmd_timeout_seconds)
        )
        return message.strip() == "gone"

    def run_batch(
        self,
        action: HelperAction,
        targets: Sequence[HelperTarget],
        bundle: ConfigBundle,
        *,
        permits: Mapping[str, RemovalPermit],
    ) -> Iterator[BatchResults]:
        """One batch pod for `targets` (see `batch_pod_shapes`), its volumes' results by name as
        they come in: while the pod runs, those it already settled (`settled_before_the_end`),
        each once; then the rest as soon as the pod ended, before the pod is deleted (nothing
        waits on that). A volume the pod never got to fails with why (the pod's own failure or
        deadline, or the error that ended the run)."""
        targets, manifest, refused = self._buildable_batch(action, targets, bundle, permits)
        if manifest is None:
            yield BatchResults(
                {**refused, **self._run_each(action, targets, bundle, permits)}, ended=True
            )
            return
        wait = float(manifest["spec"]["activeDeadlineSeconds"]) + BATCH_WAIT_MARGIN_SECONDS
        names = [target.volume_name for target in targets]
        started = time.monotonic()
        early: set[str] = set()
        states = self._runner.follow_to_end(manifest, wait)
        kept = False
        try:
            try:
                while True:
                    try:
                        pod = next(states)
                    except StopIteration as end:
                        seconds, final = end.value
                        break
                    fresh = [
                        outcome.volume_name
                        for outcome in settled_before_the_end(action, pod, names)
                        if outcome.volume_name not in early
                    ]
                    if fresh:
                        done = time.monotonic() - started
                        yield BatchResults(dict.fromkeys(fresh, RunResult(done)), ended=False)
                        early.update(fresh)
                        for _ in fresh:
                            self._metrics.observe_helper_pod(action, "succeeded", done)
                kept = True
                results = self._results(
                    action,
                    manifest,
                    targets,
                    seconds=seconds,
                    final=final,
                    unfinished=f"the pod ended ({_pod_end(final)}) before this volume's turn",
                    ended=None,
                    early=early,
                )
            except HelperPodError as error:
                results = self._results(
                    action,
                    manifest,
                    targets,
                    seconds=error.duration or 0.0,
                    final=error.last_seen or {},
                    unfinished=str(error),
                    ended=error,
                    early=early,
                )
            yield BatchResults({**refused, **results}, ended=True)
        finally:
            # Kept for its outcomes once it ended; left early (the caller stopped), the
            # runner deletes it as it closes.
            if kept:
                self._runner.delete(manifest)
            states.close()

    def _buildable_batch(
        self,
        action: HelperAction,
        targets: Sequence[HelperTarget],
        bundle: ConfigBundle,
        permits: Mapping[str, RemovalPermit],
    ) -> tuple[list[HelperTarget], dict[str, Any] | None, dict[str, RunResult]]:
        """The batch pod for the volumes whose part of it can be built (None when fewer than
        two are left), those volumes, and the failures of the others: one volume's bad input
        never fails the rest of its batch."""
        kept, refused = list(targets), {}
        while len(kept) > 1:
            try:
                manifest = build_batch_helper_pod(
                    action,
                    kept,
                    bundle,
                    self._helper.namespace,
                    self._helper.service_account,
                    permits=permits,
                )
            except VolumePartError as error:
                log.warning("%s: it fails alone, the rest of its batch goes on", error)
                self._metrics.observe_helper_pod(action, "failed", 0.0)
                pod = batch_pod_name(action, [target.volume_name for target in targets])
                failure = HelperPodNotBuilt(f"{self._helper.namespace}/{pod}", error)
                refused[error.volume_name] = RunResult(0.0, failure)
                kept = [target for target in kept if target.volume_name != error.volume_name]
            else:
                return kept, manifest, refused
        return kept, None, refused

    def _run_each(
        self,
        action: HelperAction,
        targets: Sequence[HelperTarget],
        bundle: ConfigBundle,
        permits: Mapping[str, RemovalPermit],
    ) -> dict[str, RunResult]:
        """What is left of a batch, in the volumes' own pods (at most one is left)."""
        results: dict[str, RunResult] = {}
        for target in targets:
            permit = permits.get(target.volume_name)
            try:
                results[target.volume_name] = RunResult(self.run(action, target, bundle, permit))
            except HelperPodError as error:
                results[target.volume_name] = RunResult(error.duration or 0.0, error)
        return results

    def _results(
        self,
        action: HelperAction,
        manifest: Mapping[str, Any],
        targets: Sequence[HelperTarget],
        *,
        seconds: float,
        final: Mapping[str, Any],
        unfinished: str,
        ended: HelperPodError | None,
        early: set[str],
    ) -> dict[str, RunResult]:
        """Each volume's result, but for those reported `early` (they count as succeeded)."""
        label = f"{self._helper.namespace}/{manifest['metadata']['name']}"
        names = [target.volume_name for target in targets]  # in order: they name containers
        results: dict[str, RunResult] = {}
        for outcome in batch_outcomes(action, final, names, unfinished=unfinished):
            if outcome.volume_name in early:
                continue
            failure: HelperPodError | None = None
            if ended is not None and outcome.reason == "NotRun":
                failure = ended
            elif not outcome.succeeded:
                failure = HelperPodFailed(
                    f"{label} ({outcome.container})",
                    outcome.exit_code,
                    outcome.reason,
                    outcome.message,
                )
            self._metrics.observe_helper_pod(action, "failed" if failure else "succeeded", seconds)
            results[outcome.volume_name] = RunResult(seconds, failure)
        log.info(
            "batch helper pod %s: %d of %d volumes succeeded in %.1fs",
            label,
            len(early) + sum(1 for result in results.values() if result.error is None),
            len(early) + len(results),
            seconds,
        )
        return results


def _pod_end(pod: Mapping[str, Any]) -> str:
    """How the pod ended, from the container that ended it (the first that did not succeed)."""
    state = PodState.of(pod)
    parts = [state.phase]
    if state.reason:
        parts.append(state.reason)
    if state.exit_code is not None:
        parts.append(f"exit code {state.exit_code}")
    if state.message.strip():
        parts.append(state.message.strip()[-500:])
    return ", ".join(parts)
