import pytest

from provisioner.kube.rate_limit import ItemExponentialBackoff, TokenBucket
from tests.provisioner.kube.fakes import FakeClock


def test_bucket_allows_a_burst_then_spaces_reservations_by_qps() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=10, burst=3, clock=clock)
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.reserve() == pytest.approx(0.1)
    assert bucket.reserve() == pytest.approx(0.2)


def test_bucket_refills_with_time_up_to_burst() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=2, burst=2, clock=clock)
    bucket.reserve()
    bucket.reserve()
    clock.advance(100)
    assert [bucket.reserve() for _ in range(2)] == [0.0, 0.0]
    assert bucket.reserve() == pytest.approx(0.5)


def test_acquire_sleeps_for_the_reserved_delay() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=4, burst=1, clock=clock)
    bucket.acquire()
    bucket.acquire()
    assert clock.sleeps == [0.0, pytest.approx(0.25)]


def test_non_positive_qps_disables_limiting() -> None:
    bucket = TokenBucket(qps=0, burst=0, clock=FakeClock())
    assert bucket.unlimited
    assert all(bucket.reserve() == 0 for _ in range(1000))


def test_burst_must_be_positive_when_limiting() -> None:
    with pytest.raises(ValueError, match="burst"):
        TokenBucket(qps=1, burst=0)


def test_backoff_doubles_per_failure_up_to_the_cap_and_forget_resets() -> None:
    backoff = ItemExponentialBackoff(base_delay=1, max_delay=10)
    assert [backoff.when("a") for _ in range(6)] == [1, 2, 4, 8, 10, 10]
    assert backoff.num_requeues("a") == 6
    assert backoff.when("b") == 1
    backoff.forget("a")
    assert backoff.num_requeues("a") == 0
    assert backoff.when("a") == 1


def test_backoff_survives_huge_failure_counts() -> None:
    backoff = ItemExponentialBackoff(base_delay=1, max_delay=300)
    delays = [backoff.when("a") for _ in range(2000)]
    assert delays[-1] == 300


def test_backoff_rejects_inverted_bounds() -> None:
    with pytest.raises(ValueError):
        ItemExponentialBackoff(base_delay=5, max_delay=1)


def test_a_spare_request_takes_only_what_the_others_leave() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=10, burst=2, clock=clock)
    bucket.acquire_spare()
    assert clock.sleeps == [], "a saved-up token is taken at once"
    assert bucket.reserve() == 0.0
    assert bucket.reserve() == pytest.approx(0.1), "the spare request borrowed nothing"
    start = clock.monotonic()
    bucket.acquire_spare()
    # It waited until the reservation ahead of it was served and a token was saved up again.
    assert clock.monotonic() - start == pytest.approx(0.2)
    assert bucket.reserve() == pytest.approx(0.1), "and it took that token"


def test_a_spare_request_queues_up_like_any_other_once_its_patience_is_out() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=1, burst=1, clock=clock)
    for _ in range(30):
        bucket.reserve()  # a long queue of ordinary requests ahead
    start = clock.monotonic()
    bucket.acquire_spare(patience=5.0)
    waited = clock.monotonic() - start
    assert 29.0 <= waited <= 31.0, waited
    assert clock.sleeps[0] == pytest.approx(5.0), "it gave up waiting for a spare token at 5 s"
