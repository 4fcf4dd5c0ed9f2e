"""When the bench counts the control plane as quiet before a start-up (the sampling is the
bench's own; the decision is pure)."""

import os

from bench.quiet import QUIET_SHARE, is_quiet, wait_until_quiet


def test_idle_windows_are_quiet_and_a_busy_one_is_not() -> None:
    calm, busy = QUIET_SHARE / 2, QUIET_SHARE * 4
    assert not is_quiet([])
    assert not is_quiet([calm])
    assert is_quiet([calm, calm])
    assert is_quiet([busy, busy * 2, calm, calm])
    assert not is_quiet([calm, calm, busy])
    assert not is_quiet([QUIET_SHARE, QUIET_SHARE])  # at the limit is not under it


def test_a_settled_load_is_quiet_and_a_decaying_back_log_is_not() -> None:
    assert is_quiet([1.9, 0.6, 0.5, 0.55])  # the binder's steady passes over a large data set
    assert not is_quiet([1.9, 1.2, 0.8])  # compaction and informers catching up
    assert not is_quiet([0.5, 0.5])  # too few windows to call it settled
    assert not is_quiet([0.5, 0.5, 1.0])  # a new burst of work


def test_an_idle_process_is_quiet_at_once_and_a_busy_one_once_its_load_is_steady() -> None:
    sleeper = os.posix_spawn("/bin/sleep", ["sleep", "30"], os.environ)
    spinner = os.posix_spawn("/bin/sh", ["sh", "-c", "while :; do :; done"], os.environ)
    try:
        idle = wait_until_quiet([sleeper], window=0.1, max_wait=5)
        assert idle.quiet and idle.seconds < 0.5 and idle.last_share < QUIET_SHARE
        busy = wait_until_quiet([spinner, sleeper], window=0.2, max_wait=1)
        assert busy.seconds >= 0.6 and busy.last_share > 0.5
    finally:
        for pid in (sleeper, spinner):
            os.kill(pid, 9)
            os.waitpid(pid, 0)
