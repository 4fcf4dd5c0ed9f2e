"""The controller's heartbeat (what /healthz reports), without a cluster: the loops it watches
are driven by hand."""

import threading
import time
from types import SimpleNamespace
from typing import Any, cast

from provisioner.kube.metrics import Metrics
from provisioner.shell.controller import Controller, ControllerSettings
from provisioner.shell.work_keys import CLAIM


def unused(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("no API call expected")


def controller() -> Controller:
    clients = SimpleNamespace(list_function=lambda path: unused)
    return Controller(
        cast(Any, clients),
        ControllerSettings(provisioner_name="p", helper_namespace="ns"),
        cast(Any, unused),
        cast(Any, SimpleNamespace(recorder=None, holds_lease=lambda: True)),
        Metrics(),
    )


def test_a_standby_or_starting_controller_is_alive() -> None:
    assert controller().liveness(stall_after=1.0) is None


def test_a_worker_stuck_on_one_key_beyond_the_bound_is_wedged() -> None:
    c = controller()
    c._started = True
    c._busy["worker-3"] = ((CLAIM, "u-1"), time.monotonic() - 5)
    assert c.liveness(stall_after=60.0) is None
    problem = c.liveness(stall_after=2.0)
    assert problem is not None and problem.startswith("worker-3 has been on claim u-1 for ")


def test_a_dead_worker_or_informer_thread_is_wedged() -> None:
    c = controller()
    c._started = True
    finished = threading.Thread(target=lambda: None, name="worker-0")
    finished.start()
    finished.join()
    c._workers.append(finished)
    assert c.liveness(stall_after=60.0) == "worker threads ended: worker-0"
    c._workers.clear()
    c.claims._thread = finished
    assert c.liveness(stall_after=60.0) == "informer claims: its thread has ended"
