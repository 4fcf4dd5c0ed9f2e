"""How long a failed helper-pod deletion waits before its next try."""

from __future__ import annotations

import pytest

from provisioner.helper_pods.pod_deletions import LAST_RETRY_SECONDS, deletion_backoff


@pytest.mark.parametrize(
    ("failures", "seconds"),
    [
        (1, 1.0),
        (2, 2.0),
        (3, 4.0),
        (6, 32.0),
        (7, LAST_RETRY_SECONDS),
        (10_000, LAST_RETRY_SECONDS),
    ],
)
def test_a_failed_deletion_is_tried_again_after_a_doubling_wait_up_to_a_minute(
    failures: int, seconds: float
) -> None:
    backoff = deletion_backoff()
    delays = [backoff.when("pod") for _ in range(failures)]
    assert delays[-1] == seconds
