"""When a helper run starts and which volumes share its pod: a pod each while slots are free,
together when they are not.

A volume never waits for company: a group (one node and action) with a free slot, of up to
`pods_per_group` pods at once, starts it at once in a pod of its own. Volumes that arrive while
every slot is taken queue up, and each pod that ends hands its slot to a fair share of them:
the waiting volumes spread over the group's slots (a share of ceil(waiting / slots), at most
`max_batch`), so they go in as many pods as the slots can run side by side. So a burst the
node's slots can hold (a StatefulSet's replicas) runs a pod per volume, all at once; a little
more than that runs its overflow a pod each too, as slots free; and a flood beyond them spends
one pod on several volumes, each pod's share as small as the slots allow.

Why not batch sooner: a kubelet starts a pod's containers one after another, noticing each
exit at its once-a-second relist, so a batch pod's volumes (an init container each) cost about a
second each in turn, while pods run side by side. Measured on a real node (kubelet 1.36,
containerd 2.2, 2 cores), twelve claims at once were all Bound in 6.4 s with a pod each against
14.4 s with one pod and a batch of eleven, their releases done in 7.8 s against 17.0 s. What a
batch saves is requests to the API server: two per pod, not per volume. And why a fair share,
not all that waits: forty claims over two real nodes, twelve slots each, put a node's last eight
volumes in the first pod to end, nine containers in turn (10.5 s), which set the burst's p99;
more slots instead (24 a node) were slower still (17.2 s for all forty against 15.6 s), a node
starting twenty pods at once.

Volumes that may not share a pod (see `batch_pod_shapes.is_batchable`) run in pods of their own
outside the groups, at most `max_single_pods` at a time (as many as the workers that used to
run them), in arrival order. Only volumes made from the same config (`tag`) share a pod.
Pure bookkeeping: the shell calls it under one lock and starts what it returns.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

J = TypeVar("J")


@dataclass(frozen=True)
class Launch(Generic[J]):
    """Jobs to run now in one pod: a pod of its own when there is one job."""

    group: Hashable | None
    """The group whose slot it holds; None for a pod outside the groups."""
    jobs: tuple[J, ...]


@dataclass
class _Queued(Generic[J]):
    job: J
    tag: object


@dataclass
class _Group(Generic[J]):
    running: int = 0
    queue: deque[_Queued[J]] = field(default_factory=deque)


class BatchPlanner(Generic[J]):
    def __init__(self, *, max_batch: int, pods_per_group: int, max_single_pods: int) -> None:
        if max_batch < 1 or pods_per_group < 1 or max_single_pods < 1:
            raise ValueError("max_batch, pods_per_group and max_single_pods must be at least 1")
        self._max_batch = max_batch
        self._pods_per_group = pods_per_group
        self._max_single_pods = max_single_pods
        self._groups: dict[Hashable, _Group[J]] = {}
        self._singles: _Group[J] = _Group()

    def submit(self, job: J, group: Hashable | None, tag: object) -> list[Launch[J]]:
        """Queue the job (group None: it needs a pod of its own); what starts now."""
        if group is None:
            self._singles.queue.append(_Queued(job, tag))
            return self._start_singles()
        state = self._groups.setdefault(group, _Group())
        state.queue.append(_Queued(job, tag))
        return self._start_group(group, state)

    def finished(self, launch: Launch[J]) -> list[Launch[J]]:
        """A launch's pod is done (whatever its outcome): its slot is free; what starts now."""
        if launch.group is None:
            self._singles.running -= 1
            return self._start_singles()
        state = self._groups[launch.group]
        state.running -= 1
        started = self._start_group(launch.group, state)
        if not state.running and not state.queue:
            del self._groups[launch.group]
        return started

    def drop_queued(self) -> list[J]:
        """Forget every job that has not started (the shell is stopping); returns them."""
        dropped = [queued.job for queued in self._singles.queue]
        self._singles.queue.clear()
        for state in self._groups.values():
            dropped += [queued.job for queued in state.queue]
            state.queue.clear()
        return dropped

    def waiting(self) -> int:
        """Jobs queued and not started."""
        return len(self._singles.queue) + sum(len(s.queue) for s in self._groups.values())

    def _start_singles(self) -> list[Launch[J]]:
        started = []
        while self._singles.queue and self._singles.running < self._max_single_pods:
            self._singles.running += 1
            started.append(Launch(None, (self._singles.queue.popleft().job,)))
        return started

    def _start_group(self, group: Hashable, state: _Group[J]) -> list[Launch[J]]:
        """A pod for each free slot, with its fair share of what waits."""
        started: list[Launch[J]] = []
        while state.queue and state.running < self._pods_per_group:
            state.running += 1
            share = min(self._max_batch, -(-len(state.queue) // self._pods_per_group))
            started.append(Launch(group, self._take_batch(state.queue, share)))
        return started

    @staticmethod
    def _take_batch(queue: deque[_Queued[J]], share: int) -> tuple[J, ...]:
        """The oldest job and, in order, the next ones of its tag, up to `share`."""
        first = queue.popleft()
        taken, kept = [first.job], deque[_Queued[J]]()
        while queue and len(taken) < share:
            queued = queue.popleft()
            if queued.tag is first.tag:
                taken.append(queued.job)
            else:
                kept.append(queued)
        kept.extend(queue)
        queue.clear()
        queue.extend(kept)
        return tuple(taken)
