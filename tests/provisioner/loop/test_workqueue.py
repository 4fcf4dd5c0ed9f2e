import threading
import time
from collections.abc import Callable, Hashable
from typing import TypeVar

import pytest

from provisioner.loop.controller import WorkQueue
from tests.provisioner.kube.fakes import FakeClock


class RecordingMetrics:
    def __init__(self) -> None:
        self.adds = 0
        self.retries = 0
        self.depth: Callable[[], int] = lambda: -1

    def added(self) -> None:
        self.adds += 1

    def retried(self) -> None:
        self.retries += 1

    def report_depth(self, read: Callable[[], int]) -> None:
        self.depth = read


T = TypeVar("T", bound=Hashable)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def queue(clock: FakeClock) -> WorkQueue[str]:
    return WorkQueue[str]("test", clock=clock)


def take(queue: WorkQueue[T]) -> T:
    item = queue.get(timeout=0)
    assert item is not None
    return item


def drain(queue: WorkQueue[T]) -> list[T]:
    items = []
    while (item := queue.get(timeout=0)) is not None:
        items.append(item)
        queue.done(item)
    return items


def test_items_come_out_in_order(queue: WorkQueue[str]) -> None:
    for item in "abc":
        queue.add(item)
    assert drain(queue) == ["a", "b", "c"]


def test_a_pending_item_is_held_once(queue: WorkQueue[str]) -> None:
    queue.add("a")
    queue.add("b")
    queue.add("a")
    assert len(queue) == 2
    assert drain(queue) == ["a", "b"]


def test_an_item_being_processed_is_not_handed_out_again_until_done(queue: WorkQueue[str]) -> None:
    queue.add("a")
    assert queue.get(timeout=0) == "a"
    queue.add("a")
    assert len(queue) == 0
    assert queue.get(timeout=0) is None
    queue.done("a")
    assert len(queue) == 1
    assert queue.get(timeout=0) == "a"


def test_done_without_re_add_does_not_requeue(queue: WorkQueue[str]) -> None:
    queue.add("a")
    queue.done(take(queue))
    assert len(queue) == 0


def test_readding_several_times_while_processing_requeues_once(queue: WorkQueue[str]) -> None:
    queue.add("a")
    item = take(queue)
    queue.add("a")
    queue.add("a")
    queue.done(item)
    assert drain(queue) == ["a"]


def test_add_after_waits_for_the_delay(queue: WorkQueue[str], clock: FakeClock) -> None:
    queue.add_after("a", 5)
    assert queue.get(timeout=0) is None
    clock.advance(4.9)
    assert queue.get(timeout=0) is None
    clock.advance(0.2)
    assert queue.get(timeout=0) == "a"


def test_add_after_keeps_the_earliest_time(queue: WorkQueue[str], clock: FakeClock) -> None:
    queue.add_after("a", 10)
    queue.add_after("a", 2)
    queue.add_after("a", 7)
    clock.advance(2)
    assert drain(queue) == ["a"]
    clock.advance(20)
    assert drain(queue) == []


def test_add_after_non_positive_delay_adds_now(queue: WorkQueue[str]) -> None:
    queue.add_after("a", 0)
    assert queue.get(timeout=0) == "a"


def test_delayed_item_already_pending_is_not_duplicated(
    queue: WorkQueue[str], clock: FakeClock
) -> None:
    queue.add("a")
    queue.add_after("a", 1)
    clock.advance(1)
    assert drain(queue) == ["a"]


def test_rate_limited_adds_back_off_exponentially_per_item(clock: FakeClock) -> None:
    queue = WorkQueue[str]("test", base_delay=1, max_delay=300, clock=clock)
    waits: list[float] = []
    for _ in range(10):
        queue.add_rate_limited("a")
        waited = 0.0
        while queue.get(timeout=0) is None:
            clock.advance(0.5)
            waited += 0.5
        queue.done("a")
        waits.append(waited)
    assert waits == [1, 2, 4, 8, 16, 32, 64, 128, 256, 300]
    assert queue.num_requeues("a") == 10
    queue.forget("a")
    assert queue.num_requeues("a") == 0


def test_backoff_is_per_item(clock: FakeClock) -> None:
    queue = WorkQueue[str]("test", base_delay=1, clock=clock)
    for _ in range(3):
        queue.add_rate_limited("a")
        clock.advance(10)
        drain(queue)
    queue.add_rate_limited("a")
    queue.add_rate_limited("b")
    clock.advance(1)
    assert drain(queue) == ["b"]
    clock.advance(7)
    assert drain(queue) == ["a"]


def test_overall_bucket_limits_retries_of_many_items(clock: FakeClock) -> None:
    queue = WorkQueue[int]("test", base_delay=0.001, qps=10, burst=100, clock=clock)
    for item in range(110):
        queue.add_rate_limited(item)
    clock.advance(0.001)
    assert len(drain(queue)) == 100
    clock.advance(0.1)
    assert drain(queue) == [100]
    clock.advance(0.9)
    assert drain(queue) == list(range(101, 110))


def test_shutdown_stops_handing_out_items_and_ignores_adds(queue: WorkQueue[str]) -> None:
    queue.add("a")
    queue.shutdown()
    assert queue.shutting_down
    assert queue.get() is None
    queue.add("b")
    queue.add_after("c", 1)
    assert len(queue) == 0


def test_shutdown_releases_a_blocked_worker() -> None:
    queue = WorkQueue[str]("test")
    results: list[str | None] = []
    worker = threading.Thread(target=lambda: results.append(queue.get()))
    worker.start()
    time.sleep(0.05)
    queue.shutdown()
    worker.join(2)
    assert not worker.is_alive()
    assert results == [None]


def test_done_after_shutdown_does_not_requeue(queue: WorkQueue[str]) -> None:
    queue.add("a")
    item = take(queue)
    queue.add("a")
    queue.shutdown()
    queue.done(item)
    assert len(queue) == 0


def test_a_blocked_worker_wakes_on_add() -> None:
    queue = WorkQueue[str]("test")
    results: list[str | None] = []
    worker = threading.Thread(target=lambda: results.append(queue.get(timeout=5)))
    worker.start()
    time.sleep(0.05)
    queue.add("a")
    worker.join(2)
    assert results == ["a"]


def test_a_blocked_worker_wakes_when_a_delay_expires() -> None:
    queue = WorkQueue[str]("test")
    queue.add_after("a", 0.1)
    started = time.monotonic()
    assert queue.get(timeout=5) == "a"
    assert 0.05 < time.monotonic() - started < 2


def test_get_times_out() -> None:
    queue = WorkQueue[str]("test")
    started = time.monotonic()
    assert queue.get(timeout=0.05) is None
    assert time.monotonic() - started >= 0.05


def test_concurrent_workers_never_process_one_item_at_the_same_time() -> None:
    queue = WorkQueue[int]("test")
    active: set[int] = set()
    overlaps: list[int] = []
    processed: list[int] = []
    lock = threading.Lock()

    def worker() -> None:
        while (item := queue.get()) is not None:
            with lock:
                if item in active:
                    overlaps.append(item)
                active.add(item)
            time.sleep(0.001)
            with lock:
                active.discard(item)
                processed.append(item)
            queue.done(item)

    workers = [threading.Thread(target=worker) for _ in range(4)]
    for thread in workers:
        thread.start()
    for round_ in range(50):
        for item in range(5):
            queue.add(item)
        if round_ % 10 == 0:
            time.sleep(0.005)
    deadline = time.monotonic() + 5
    while (len(queue) or any(i in active for i in range(5))) and time.monotonic() < deadline:
        time.sleep(0.01)
    queue.shutdown()
    for thread in workers:
        thread.join(2)
    assert overlaps == []
    assert set(processed) == set(range(5))


def test_metrics_count_adds_retries_and_depth(clock: FakeClock) -> None:
    metrics = RecordingMetrics()
    queue = WorkQueue[str]("test", clock=clock, metrics=metrics)
    queue.add("a")
    queue.add("a")
    queue.add("b")
    assert metrics.adds == 2
    assert metrics.depth() == 2
    queue.done(take(queue))
    assert metrics.depth() == 1
    queue.add_rate_limited("c")
    assert metrics.retries == 1


def test_low_priority_keys_come_out_once_no_other_key_is_ready(queue: WorkQueue[str]) -> None:
    for item in "abc":
        queue.add(item, low_priority=True)
    queue.add("x")
    assert take(queue) == "x"
    queue.done("x")
    queue.add("y")
    assert drain(queue) == ["y", "a", "b", "c"]


def test_a_low_priority_key_added_normally_moves_up_and_comes_out_once(
    queue: WorkQueue[str],
) -> None:
    for item in "abc":
        queue.add(item, low_priority=True)
    queue.add("c")
    queue.add("b", low_priority=True)  # already queued: stays where it is
    assert len(queue) == 3
    assert drain(queue) == ["c", "a", "b"]
    assert len(queue) == 0


def test_a_low_priority_key_added_while_processed_waits_for_done_and_keeps_its_priority(
    queue: WorkQueue[str],
) -> None:
    queue.add("a", low_priority=True)
    queue.add("b", low_priority=True)
    queue.add("b")  # moved up: its low entry stays behind, stale
    assert take(queue) == "b"
    queue.add("b", low_priority=True)  # while a worker has it
    assert take(queue) == "a"
    # The stale entry must not hand "b" to a second worker while the first has it.
    assert queue.get(timeout=0) is None
    assert len(queue) == 0
    queue.done("b")
    queue.add("c")
    assert drain(queue) == ["c", "b"]


def test_the_depth_counts_low_priority_keys(clock: FakeClock) -> None:
    metrics = RecordingMetrics()
    queue = WorkQueue[str]("test", clock=clock, metrics=metrics)
    queue.add("a", low_priority=True)
    queue.add("b")
    assert metrics.depth() == 2
    queue.shutdown()
    assert metrics.depth() == 0
