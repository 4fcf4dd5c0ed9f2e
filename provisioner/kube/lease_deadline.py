"""When a leader must stop working: the arithmetic that keeps two replicas from leading at once.

A standby takes the lease `leaseDurationSeconds` after *it* saw the last renewal change the
Lease, and it cannot see a renewal before the leader sent it. So a leader that stops
`renew_deadline` after it *sent* its last successful renewal stops at least
`lease_duration - renew_deadline` before any standby may start, whatever the network and the
API server did to the requests in between (hung, throttled, reset): that difference is the
safety margin. Every lease request must therefore end by that deadline, so each one's timeout is
what is left of it when the request is sent, never a figure computed once for several requests.
"""

from __future__ import annotations

import math


def leading_deadline(renewal_sent_at: float, renew_deadline: float) -> float:
    """The moment (on the monotonic clock) a leader stops unless it renews again: measured from
    when the last successful renewal (or the acquiring write) was *sent*, not from its answer,
    which may come arbitrarily late."""
    return renewal_sent_at + renew_deadline


def lease_request_timeout(deadline: float, now: float) -> float | None:
    """Seconds the next lease request may take, or None when the deadline has passed and no
    request may be sent: a renewal that lands after it would not make leading safe again."""
    remaining = deadline - now
    return remaining if remaining > 0 else None


def written_lease_seconds(lease_duration: float) -> int:
    """`leaseDurationSeconds` for the Lease (whole seconds, at least 1). Rounded *up*: a standby
    waiting longer than our configured duration is safe, one waiting less is not (1.4 s rounded
    down to 1 s would let a standby start while this leader still works)."""
    return max(1, math.ceil(lease_duration))
