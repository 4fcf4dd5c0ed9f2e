"""Whether the Kubernetes API answers, for /readyz: a thread of its own asks (`GET /version`)
every `CHECK_INTERVAL_SECONDS`, and a probe reads its last answer.

Why not ask in the probe: a kubelet's probe has a timeout (3 s in the stack's Deployment), and
on a busy node the call and the probe's own work now and then outlived it: a failed probe, a
Warning event on the pod, for a process that was fine. The first answer is asked for before
the probe server answers anything (`start`), so no probe sees "not yet asked".
"""

from __future__ import annotations

import logging
import threading

from urllib3.exceptions import HTTPError

from provisioner.kube.api_error import ApiError
from provisioner.kube.client import KubeClients

log = logging.getLogger(__name__)

CHECK_INTERVAL_SECONDS = 5.0
CHECK_TIMEOUT_SECONDS = 2.0


class ApiReachability:
    def __init__(self, clients: KubeClients, interval: float = CHECK_INTERVAL_SECONDS) -> None:
        self._clients = clients
        self._interval = interval
        self._reachable = False
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Asks once now, then every interval on a thread of its own, until `stop`."""
        if self._thread is not None:
            return
        self._reachable = self._ask()
        self._thread = threading.Thread(target=self._keep_asking, name="api-check", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()

    def reachable(self) -> bool:
        """The last answer; never waits on the API."""
        return self._reachable

    def _keep_asking(self) -> None:
        while not self._stopped.wait(self._interval):
            self._reachable = self._ask()

    def _ask(self) -> bool:
        try:
            self._clients.request_json("GET", "/version", timeout=CHECK_TIMEOUT_SECONDS)
        except (ApiError, HTTPError, OSError) as error:
            log.debug("the Kubernetes API did not answer /version: %s", error)
            return False
        return True
