"""The watchdog fires once the deadline passes, later when re-armed, never when disarmed."""

import threading
import time

from provisioner.kube.lease_watchdog import LeaseWatchdog


class Fired:
    def __init__(self) -> None:
        self.at: list[float] = []
        self.event = threading.Event()

    def __call__(self) -> None:
        self.at.append(time.monotonic())
        self.event.set()


def test_it_fires_at_the_deadline() -> None:
    fired = Fired()
    armed_at = time.monotonic()
    LeaseWatchdog(fired).arm(armed_at + 0.2)
    assert fired.event.wait(2)
    assert 0.2 <= fired.at[0] - armed_at < 0.5


def test_arming_again_moves_the_deadline() -> None:
    fired = Fired()
    watchdog = LeaseWatchdog(fired)
    start = time.monotonic()
    watchdog.arm(start + 0.2)
    time.sleep(0.1)
    watchdog.arm(start + 0.5)
    assert fired.event.wait(2)
    assert fired.at[0] - start >= 0.5
    assert len(fired.at) == 1


def test_disarmed_it_never_fires_and_it_can_be_armed_again() -> None:
    fired = Fired()
    watchdog = LeaseWatchdog(fired)
    watchdog.arm(time.monotonic() + 0.2)
    watchdog.disarm()
    assert not fired.event.wait(0.5)
    watchdog.arm(time.monotonic() + 0.1)
    assert fired.event.wait(2)
    assert len(fired.at) == 1
