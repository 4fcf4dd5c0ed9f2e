"""When the bench counts the control plane as quiet before a start-up (the sampling is the
bench's own; the decision is pure)."""

import os

from bench.quiet import QUIET_SHARE, QUIET_WINDOWS, is_quiet, wait_until_quiet


def test_quiet_takes_the_last_windows_all_under_the_limit() -> None:
    busy, calm = QUIET_SHARE * 4, QUIET_SHARE / 2
    assert not is_quiet([])
    assert not is_quiet([calm] * (QUIET_WINDOWS - 1))
    assert is_quiet([calm] * QUIET_WINDOWS)
    assert is_quiet([busy, busy] + [calm] * QUIET_WINDOWS)
    assert not is_quiet([calm] * QUIET_WINDOWS + [busy])
    assert not is_quiet([calm, busy] + [calm] * (QUIET_WINDOWS - 1))
    assert not is_quiet([QUIET_SHARE] * QUIET_WINDOWS)  # at the limit is not under it


def test_an_idle_process_is_quiet_at_once_and_a_busy_one_is_given_up_on() -> None:
    sleeper = os.posix_spawn("/bin/sleep", ["sleep", "30"], os.environ)
    spinner = os.posix_spawn("/bin/sh", ["sh", "-c", "while :; do :; done"], os.environ)
    try:
        idle = wait_until_quiet([sleeper], window=0.1, max_wait=5)
        assert idle.quiet and idle.seconds < 0.2 and idle.last_share < QUIET_SHARE
        busy = wait_until_quiet([spinner], window=0.2, max_wait=1)
        assert not busy.quiet and busy.seconds >= 1 and busy.last_share > QUIET_SHARE
    finally:
        for pid in (sleeper, spinner):
            os.kill(pid, 9)
            os.waitpid(pid, 0)
