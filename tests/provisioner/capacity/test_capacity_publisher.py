"""The publisher's adaptive window: a lone change is published at once, a burst in few passes."""

from __future__ import annotations

import itertools

from provisioner.capacity.capacity_publisher import next_window

MIN, MAX = 1.0, 4.0


def test_a_change_after_a_quiet_spell_gets_the_shortest_window() -> None:
    assert next_window(4.0, 10.0, MIN, MAX) == MIN
    assert next_window(1.0, 1.5, MIN, MAX) == MIN


def test_changes_that_keep_coming_double_the_window_up_to_its_cap() -> None:
    windows = [MIN]
    for _ in range(4):
        windows.append(next_window(windows[-1], 0.1, MIN, MAX))
    assert windows == [1.0, 2.0, 4.0, 4.0, 4.0]


def test_a_burst_of_changes_costs_passes_by_its_length_not_its_size() -> None:
    """Changes every 0.05 s for 20 s (a 200-claim burst at 10 a second), passes scheduled as
    the publisher's loop does: each gathers every change made before it runs."""
    passes: list[float] = []
    last, window = -60.0, MIN
    for at in (index * 0.05 for index in range(400)):
        if passes and at <= passes[-1]:
            continue  # gathered into the pass already scheduled
        window = next_window(window, at - last, MIN, MAX)
        last = max(at, last + window)
        passes.append(last)
    # One pass a second would be 20; the adaptive window makes it a handful.
    assert len(passes) <= 8, passes
    # What the scheduler sees is never older than the longest window.
    assert all(later - earlier <= MAX for earlier, later in itertools.pairwise(passes)), passes
