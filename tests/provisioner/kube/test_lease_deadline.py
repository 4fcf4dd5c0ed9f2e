"""The arithmetic that decides when a leader must stop: measured from when its last successful
renewal was sent, each request bounded by what is left, the Lease's duration never rounded down."""

import pytest

from provisioner.kube.lease_deadline import (
    leading_deadline,
    lease_request_timeout,
    written_lease_seconds,
)


def test_the_deadline_counts_from_when_the_renewal_was_sent_not_answered() -> None:
    assert leading_deadline(renewal_sent_at=100.0, renew_deadline=10.0) == 110.0


@pytest.mark.parametrize(
    ("now", "expected"),
    [(100.0, 10.0), (107.5, 2.5), (109.99, pytest.approx(0.01)), (110.0, None), (200.0, None)],
)
def test_each_request_gets_what_is_left_and_none_is_sent_past_the_deadline(
    now: float, expected: object
) -> None:
    assert lease_request_timeout(deadline=110.0, now=now) == expected


@pytest.mark.parametrize(
    ("configured", "written"), [(15.0, 15), (1.4, 2), (1.5, 2), (0.2, 1), (2.0, 2)]
)
def test_the_lease_duration_written_is_never_shorter_than_the_configured_one(
    configured: float, written: int
) -> None:
    assert written_lease_seconds(configured) == written
    assert written >= configured
