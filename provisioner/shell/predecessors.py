"""Waiting, before working, until the provisioner this one takes over is gone.

rancher/local-path-provisioner v0.0.37 holds no leader lock (its main.go turns the library's
election off), so there is no Lease the two could share. A replica taking over its installation
(stack config `adopt`, `--predecessor-selector`) therefore starts its controller only once no
pod of rancher's is left in its namespace, a terminating one included: such a pod works until
its process ends. The leader waits (standbys wait on the lease anyway), after winning the lease
and before its informers start, so no claim is looked at while rancher may still provision it.
"""

from __future__ import annotations

import logging
import threading

from urllib3.exceptions import HTTPError

from provisioner.kube.api_error import ApiError
from provisioner.kube.client import KubeClients

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0


def wait_for_predecessors(
    clients: KubeClients,
    namespace: str,
    selector: str,
    stopping: threading.Event,
    poll_seconds: float = POLL_SECONDS,
) -> bool:
    """True once no pod in `namespace` matches `selector`; False when `stopping` is set first.
    A failed list is retried: not knowing is not "gone"."""
    announced: set[str] = set()
    while not stopping.is_set():
        try:
            listed = clients.request_json(
                "GET", f"/api/v1/namespaces/{namespace}/pods", query={"labelSelector": selector}
            )
        except (ApiError, HTTPError, OSError) as error:
            log.warning("listing the predecessor's pods (%s) failed, retrying: %s", selector, error)
        else:
            names = {str(pod["metadata"]["name"]) for pod in listed.get("items") or ()}
            if not names:
                if announced:
                    log.info("the predecessor's pods (%s) are gone: provisioning", selector)
                return True
            if names - announced:
                log.info(
                    "not provisioning while the predecessor's pods (%s) run: %s",
                    selector,
                    ", ".join(sorted(names)),
                )
                announced |= names
        stopping.wait(poll_seconds)
    return False
