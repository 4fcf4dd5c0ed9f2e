"""The generic loop without a cluster: its heartbeat (what /healthz reports) with the loops it
watches driven by hand, and what it does with each outcome of a reconcile, driven by a
scripted reconciler."""

import threading
import time
from collections.abc import Sequence
from typing import Any

from provisioner.kube.informer import Informer
from provisioner.kube.object_decoding import DictObjects
from provisioner.loop.controller import (
    IN_BACKGROUND,
    SETTLED,
    Controller,
    ControllerSettings,
    Failed,
    Key,
    Outcome,
    Watch,
    WorkQueue,
)

WAIT = 10.0


def unused(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("no API call expected")


def informer(name: str) -> Informer[dict[str, Any]]:
    return Informer(name, unused, objects=DictObjects(), to_record=dict, key=lambda o: o["name"])


class ScriptedReconciler:
    """Watches one informer (twice: an informer the loop runs once), queues each event's object
    under kind "thing", and answers each reconcile with the next scripted outcome."""

    def __init__(self, *outcomes: Outcome | Exception) -> None:
        self.things = informer("things")
        self.outcomes = list(outcomes)
        self.reconciled: list[Key] = []
        self.done = threading.Semaphore(0)

    def watches(self) -> Sequence[Watch[Any]]:
        def queue(key: str, old: Any, new: Any) -> list[Key]:
            return [("thing", key)]

        return [Watch(self.things, queue), Watch(self.things, lambda key, old, new: [])]

    def reconcile(self, key: Key) -> Outcome:
        self.reconciled.append(key)
        try:
            outcome = self.outcomes.pop(0)
            if isinstance(outcome, Exception):
                raise outcome
            return outcome
        finally:
            self.done.release()


class IdleLifecycle:
    def start(self) -> None:
        pass

    def stop_starting(self) -> None:
        pass

    def wait_for_runs(self, deadline: float) -> Sequence[Key]:
        return []

    def abandon_runs(self) -> None:
        pass

    def liveness(self) -> str | None:
        return None


def controller(
    reconciler: ScriptedReconciler | None = None, retry_limit: int = 0
) -> tuple[Controller, WorkQueue[Key]]:
    queue: WorkQueue[Key] = WorkQueue("test", base_delay=0.01, max_delay=0.01)
    reconciler = reconciler or ScriptedReconciler()
    made = Controller(
        queue,
        reconciler.watches(),
        reconciler,
        IdleLifecycle(),
        ControllerSettings(workers=1, retry_limits={"thing": retry_limit}),
    )
    return made, queue


def test_a_standby_or_starting_controller_is_alive() -> None:
    assert controller()[0].liveness(stall_after=1.0) is None


def test_a_worker_stuck_on_one_key_beyond_the_bound_is_wedged() -> None:
    c, _ = controller()
    c._started = True
    c._busy["worker-3"] = (("claim", "u-1"), time.monotonic() - 5)
    assert c.liveness(stall_after=60.0) is None
    problem = c.liveness(stall_after=2.0)
    assert problem is not None and problem.startswith("worker-3 has been on claim u-1 for ")


def test_a_dead_worker_or_informer_thread_is_wedged() -> None:
    c, _ = controller()
    c._started = True
    finished = threading.Thread(target=lambda: None, name="worker-0")
    finished.start()
    finished.join()
    c._workers.append(finished)
    assert c.liveness(stall_after=60.0) == "worker threads ended: worker-0"
    c._workers.clear()
    c.informers[0]._thread = finished
    assert c.liveness(stall_after=60.0) == "informer things: its thread has ended"


def test_a_warm_standbys_dead_informer_thread_is_wedged_though_no_worker_runs() -> None:
    """A standby's informers keep its caches warm: one that ended fails /healthz there too."""
    c, _ = controller()
    c._informers_started = True
    finished = threading.Thread(target=lambda: None, name="informer")
    finished.start()
    finished.join()
    c.informers[0]._thread = finished
    assert c.liveness(stall_after=60.0) == "informer things: its thread has ended"


def test_an_informer_watched_twice_runs_once_and_its_events_queue_the_keys_the_watch_says() -> None:
    reconciler = ScriptedReconciler()
    c, queue = controller(reconciler)
    assert c.informers == [reconciler.things]
    reconciler.things._store("a", {"name": "a"})
    assert queue.get(timeout=WAIT) == ("thing", "a")


def test_keys_of_a_first_list_and_of_a_resync_queue_behind_every_other_key() -> None:
    """A sweeping watch's keys from the informer's first list (before it has synced) and from
    its resyncs (the cached record as old and new) come out after the others; its keys from
    a change after the first list do not."""
    swept, things = informer("swept"), informer("things")
    queue: WorkQueue[Key] = WorkQueue("test")
    Controller(
        queue,
        [
            Watch(swept, lambda key, old, new: [("swept", key)], sweep_last=True),
            Watch(things, lambda key, old, new: [("thing", key)]),
        ],
        ScriptedReconciler(),
        IdleLifecycle(),
        ControllerSettings(workers=1),
    )

    def drain() -> list[Key]:
        keys = []
        while (key := queue.get(timeout=0)) is not None:
            keys.append(key)
            queue.done(key)
        return keys

    for name in "abc":
        swept._store(name, {"name": name})  # its first list
    swept._synced.set()
    things._store("new", {"name": "new"})
    swept._store("d", {"name": "d"})
    assert drain() == [
        ("thing", "new"),
        ("swept", "d"),
        ("swept", "a"),
        ("swept", "b"),
        ("swept", "c"),
    ]
    swept._resync()
    things._store("later", {"name": "later"})
    assert drain()[0] == ("thing", "later")


def work(c: Controller, queue: WorkQueue[Key], reconciler: ScriptedReconciler, times: int) -> None:
    """A worker reconciles ("thing", "a") `times` times, and is done with it (forgot, retried
    or kept it) before the queue ends the worker."""
    worker = threading.Thread(target=c._work)
    worker.start()
    for _ in range(times):
        assert reconciler.done.acquire(timeout=WAIT)
    deadline = time.monotonic() + WAIT
    while ("thing", "a") in queue._processing and time.monotonic() < deadline:
        time.sleep(0.01)
    queue.shutdown()
    worker.join(WAIT)
    assert reconciler.reconciled == [("thing", "a")] * times


def test_a_failure_is_retried_with_backoff_and_a_settled_key_forgets_its_failures() -> None:
    reconciler = ScriptedReconciler(Failed("a write was refused"), RuntimeError("a bug"), SETTLED)
    c, queue = controller(reconciler)
    queue.add(("thing", "a"))
    work(c, queue, reconciler, 3)
    assert queue.num_requeues(("thing", "a")) == 0


def test_a_key_in_the_background_keeps_its_failures() -> None:
    reconciler = ScriptedReconciler(IN_BACKGROUND)
    c, queue = controller(reconciler)
    queue.add_rate_limited(("thing", "a"))
    work(c, queue, reconciler, 1)
    assert queue.num_requeues(("thing", "a")) == 1


def test_the_loop_gives_up_on_a_key_after_its_kinds_retry_limit() -> None:
    reconciler = ScriptedReconciler(Failed("refused"), Failed("refused"))
    c, queue = controller(reconciler, retry_limit=1)
    queue.add(("thing", "a"))
    work(c, queue, reconciler, 2)
    assert queue.num_requeues(("thing", "a")) == 0, "retried past its limit"
