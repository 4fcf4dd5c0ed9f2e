import threading
import time
from typing import Any

from provisioner.helper_pods.pod_events import ADDED, DELETED, MODIFIED, PodEventHub


def pod(name: str, uid: str, version: str, phase: str = "Pending") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": uid, "resourceVersion": version},
        "status": {"phase": phase},
    }


def collect(hub: PodEventHub, start: dict[str, Any], seconds: float) -> list[tuple[str, str]]:
    until = time.monotonic() + seconds
    return [
        (event["type"], event["object"]["status"]["phase"]) for event in hub.follow(start, until)
    ]


def test_a_change_published_before_following_is_not_missed() -> None:
    hub = PodEventHub()
    created = pod("helper", "u1", "1")
    hub.publish(ADDED, created)
    hub.publish(MODIFIED, pod("helper", "u1", "2", "Succeeded"))
    events = hub.follow(created, time.monotonic() + 1)
    assert next(events)["object"]["status"]["phase"] == "Succeeded"
    events.close()


def test_followers_see_later_changes_and_the_deletion() -> None:
    hub = PodEventHub()
    created = pod("helper", "u1", "1")
    hub.publish(ADDED, created)

    def later() -> None:
        time.sleep(0.05)
        hub.publish(MODIFIED, pod("helper", "u1", "2", "Running"))
        time.sleep(0.05)
        hub.publish(DELETED, pod("helper", "u1", "3", "Running"))

    threading.Thread(target=later).start()
    assert collect(hub, created, 5) == [(MODIFIED, "Running"), (DELETED, "Running")]


def test_another_incarnation_of_the_name_is_ignored_and_following_times_out() -> None:
    hub = PodEventHub()
    ours = pod("helper", "u1", "1")
    hub.publish(MODIFIED, pod("helper", "someone-else", "7", "Failed"))
    started = time.monotonic()
    assert collect(hub, ours, 0.2) == []
    assert time.monotonic() - started >= 0.2


def test_deleted_pods_nobody_follows_are_forgotten() -> None:
    hub = PodEventHub()
    hub.publish(ADDED, pod("helper", "u1", "1"))
    hub.publish(DELETED, pod("helper", "u1", "2"))
    assert collect(hub, pod("helper", "u1", "1"), 0.1) == []
