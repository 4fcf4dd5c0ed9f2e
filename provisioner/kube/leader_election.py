"""Leader election on a coordination.k8s.io/v1 Lease, the algorithm of client-go's leaderelection:

- a candidate takes the lease when it is free (no holder) or when the holder's record has not
  changed for leaseDurationSeconds, measured on *our* clock from when we observed the change, so
  clock skew between nodes does not matter;
- the leader renews every `retry_period`; it stops leading `renew_deadline` after it *sent* its
  last successful renewal (see `provisioner.kube.lease_deadline` for why that is safe), and at
  once if it sees another holder. Each lease request's timeout is what is left until then, the
  requests go through clients of their own (their own connections and rate budget, no hidden
  retries: `KubeClients.leader_election_clients`), and a watchdog thread (`LeaseWatchdog`)
  declares the lease lost at the deadline even when this thread is stuck in a request;
- on a graceful stop the leader releases the lease (empty holder, duration 1 s) so a standby
  takes over immediately instead of after the lease expires;
- a standby reads the Lease every STANDBY_LOOK_SECONDS and may also be told of its changes as
  a watch hears them (`heard`, from `provisioner.kube.lease_watch`): it then sees the last
  renewal when it is written, not up to a look later, and takes the lease that much sooner.
  Either way a change is timed when we see it, never before it was written, so the margin
  below holds.

Writes use resourceVersion preconditions: two candidates racing for the lease cannot both win.
Callbacks run on the elector's thread and must return promptly (start threads, do not block):
a blocked callback stops renewal, and the watchdog then declares the lease lost.
`on_lost_lease` is the exception: it runs on whichever thread notices the loss first and is
where the process ends itself (`Provisioner._lost_lease`).
"""

from __future__ import annotations

import copy
import logging
import os
import random
import re
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from http import HTTPStatus
from typing import Any

from urllib3.exceptions import HTTPError

from provisioner.kube.api_error import ApiError
from provisioner.kube.client import JsonRequester
from provisioner.kube.clock import SYSTEM_CLOCK, Clock
from provisioner.kube.lease_deadline import (
    leading_deadline,
    lease_request_timeout,
    written_lease_seconds,
)
from provisioner.kube.lease_watchdog import LeaseWatchdog

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LeaderElectionConfig:
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    release_on_stop: bool = True

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError(
                "need 0 < retry_period < renew_deadline < lease_duration, got "
                f"{self.retry_period}, {self.renew_deadline}, {self.lease_duration}"
            )


STANDBY_LOOK_SECONDS = 0.5
"""How often a candidate that does not lead reads the Lease, at most (else every retry period)."""
EXPIRY_MARGIN_SECONDS = 0.05
"""How long after a lease's expiry (on our clock) a standby tries to take it: past the moment,
so the attempt finds it expired."""


def lease_name_for(provisioner_name: str) -> str:
    """A valid Lease name (DNS subdomain) from a provisioner name such as
    `local-path-storage.io/local-path` -> `local-path-storage.io-local-path`.

    For a name of lower-case letters, digits, dots, dashes and one slash (rancher.io/local-path)
    this is sig-storage-lib-external-provisioner's lock name (`strings.Replace(name, "/", "-")`,
    controller.go), in the same namespace (POD_NAMESPACE): a replica of ours taking over such a
    provisioner campaigns on the very Lease its replicas would hold. rancher v0.0.37 holds none
    (its main.go passes `LeaderElection(false)`), so the takeover stops it before ours starts."""
    name = re.sub(r"[^a-z0-9.-]+", "-", provisioner_name.lower())
    name = name[:253].strip("-.")
    if not name:
        raise ValueError(f"cannot derive a lease name from {provisioner_name!r}")
    return name


def default_identity() -> str:
    """Unique per process, readable in `kubectl get lease`: hostname (the pod name), pid, and a
    random suffix so a restarted container never mistakes its predecessor's lease for its own."""
    return f"{socket.gethostname()}_{os.getpid()}_{uuid.uuid4().hex[:8]}"


def _micro_time(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        clients: JsonRequester,
        namespace: str,
        lease_name: str,
        *,
        identity: str | None = None,
        config: LeaderElectionConfig | None = None,
        on_started_leading: Callable[[], None] | None = None,
        on_stopped_leading: Callable[[], None] | None = None,
        on_lost_lease: Callable[[], None] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """`on_lost_lease` is called once when leading ends other than by `stop()` (a renewal
        that failed until the deadline, another holder, or the watchdog), before
        `on_stopped_leading`, and possibly on the watchdog's thread while this one is stuck."""
        self.identity = identity or default_identity()
        self.namespace = namespace
        self.lease_name = lease_name
        self._clients = clients
        self._config = config or LeaderElectionConfig()
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._on_lost = on_lost_lease
        self._clock = clock
        self._path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{lease_name}"
        self._stop = threading.Event()
        self._leading = False
        self._written: dict[str, Any] | None = None
        """The Lease as our last successful write returned it."""
        self._observed_spec: dict[str, Any] = {}
        self._observed_at = 0.0
        self._observed_lock = threading.Lock()
        """`_observe` runs on this thread and on a lease watch's."""
        self._thread: threading.Thread | None = None
        self._deadline = 0.0
        """Monotonic: leading ends here unless a renewal sent before it succeeds."""
        self._attempt_started = 0.0
        """When the current acquire or renew attempt began: its writes were all sent later."""
        self._lost = False
        self._lost_lock = threading.Lock()
        self._watchdog = LeaseWatchdog(self._deadline_passed, clock.monotonic)

    @property
    def is_leader(self) -> bool:
        return self._leading

    def holds_lease(self) -> bool:
        """Leading, and the deadline of the last renewal not passed: what a removal's proof
        asks just before it is decided (the watchdog may not have fired yet)."""
        return self._leading and not self._lost and self._clock.monotonic() < self._deadline

    @property
    def running(self) -> bool:
        """Campaigning or leading: the election's thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def observed_holder(self) -> str:
        """The holder in the lease as we last read it ("" when free or not read yet)."""
        return str(self._observed_spec.get("holderIdentity") or "")

    def start(self) -> None:
        """Run the election on a daemon thread (see `run`)."""
        self._thread = threading.Thread(target=self.run, name="leader-election", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = 10.0) -> None:
        """Stop campaigning; if leading, release the lease and call on_stopped_leading."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def run(self) -> None:
        """Campaign until leading, lead until the lease is lost or `stop()` is called."""
        if not self._acquire():
            return
        self._watchdog.arm(self._deadline)
        self._leading = True
        log.info(
            "became leader for lease %s/%s as %s", self.namespace, self.lease_name, self.identity
        )
        self._call(self._on_started, "on_started_leading")
        lost = self._renew_until_lost_or_stopped()
        if lost:
            self._lose()
        else:
            if self._config.release_on_stop:
                self._release()
            self._watchdog.disarm()
        self._leading = False
        log.info(
            "stopped leading lease %s/%s (%s)",
            self.namespace,
            self.lease_name,
            "lost" if lost else "released",
        )
        self._call(self._on_stopped, "on_stopped_leading")

    def _acquire(self) -> bool:
        config = self._config
        while not self._stop.is_set():
            if self._try_acquire_or_renew():
                return True
            # Jitter (client-go's factor 1.2) keeps standbys from hitting the lease in lockstep.
            # A standby looks at most STANDBY_LOOK_SECONDS apart: a lease expires a duration
            # after we *saw* its last renewal, so each second we are late seeing it is a second
            # more of every failover (one read, not a write, each look).
            look = min(config.retry_period, STANDBY_LOOK_SECONDS)
            wait = look * (1 + random.random() * 0.2)  # noqa: S311
            # And no later than the holder's lease expires by our clock: on its tick alone a
            # standby took over up to a retry period after that (up to 2.4 s of a failover).
            expires_in = self._expires_in()
            if expires_in is not None:
                wait = min(wait, max(expires_in, 0.0) + EXPIRY_MARGIN_SECONDS)
            self._stop.wait(wait)
        return False

    def _expires_in(self) -> float | None:
        """Seconds until another holder's lease, as we last saw it change, expires on our
        clock; None when no one else holds it."""
        with self._observed_lock:
            spec, observed_at = self._observed_spec, self._observed_at
        holder = str(spec.get("holderIdentity") or "")
        if holder in ("", self.identity):
            return None
        duration = spec.get("leaseDurationSeconds") or self._config.lease_duration
        return float(observed_at + duration - self._clock.monotonic())

    def _renew_until_lost_or_stopped(self) -> bool:
        config = self._config
        while not self._stop.wait(config.retry_period):
            while not self._try_acquire_or_renew():
                if self.observed_holder not in ("", self.identity):
                    log.warning("lease %s taken over by %s", self.lease_name, self.observed_holder)
                    return True
                remaining = self._deadline - self._clock.monotonic()
                if remaining <= 0:
                    log.warning(
                        "could not renew lease %s within %.1fs of the last renewal",
                        self.lease_name,
                        config.renew_deadline,
                    )
                    return True
                if self._stop.wait(min(config.retry_period, remaining)):
                    return False
            if self._lost:
                return True
        return False

    def _timeout(self) -> float | None:
        """The next lease request's timeout: what is left until the deadline (None: past it,
        or lost, send nothing). While campaigning, the deadline the attempt would give us: a
        lease taken by a write that answered later would be one we must give up at once."""
        if self._lost:
            return None
        deadline = self._deadline
        if not self._leading:
            deadline = leading_deadline(self._attempt_started, self._config.renew_deadline)
        return lease_request_timeout(deadline, self._clock.monotonic())

    def _renewed(self, sent_at: float) -> None:
        self._deadline = leading_deadline(sent_at, self._config.renew_deadline)
        if self._leading:
            self._watchdog.arm(self._deadline)

    def _deadline_passed(self) -> None:
        log.error(
            "lease %s/%s not renewed within %.1fs of the last renewal: leaderelection lost",
            self.namespace,
            self.lease_name,
            self._config.renew_deadline,
        )
        self._lose()

    def _lose(self) -> None:
        """Leading is over and not by choice: tell `on_lost_lease`, once."""
        with self._lost_lock:
            if self._lost:
                return
            self._lost = True
        self._leading = False
        self._watchdog.disarm()
        self._call(self._on_lost, "on_lost_lease")

    def _try_acquire_or_renew(self) -> bool:
        self._attempt_started = self._clock.monotonic()
        now = self._clock.now()
        if self._leading and self._written is not None:
            # Renewing: write on top of the Lease as we last wrote it. Its resourceVersion makes
            # the write fail if anyone else touched the Lease since, and only then do we read it
            # again; a renewal costs one request instead of a read and a write.
            renewal = copy.deepcopy(self._written)
            renewal["spec"]["renewTime"] = _micro_time(now)
            if self._write("PUT", self._path, renewal):
                return True
        try:
            lease = self._send("GET", self._path)
        except ApiError as e:
            if e.status != HTTPStatus.NOT_FOUND:
                log.warning("reading lease %s: HTTP %s %s", self.lease_name, e.status, e.reason)
                return False
            return self._create(now)
        except (HTTPError, OSError) as e:
            log.warning("reading lease %s: %s", self.lease_name, e)
            return False
        spec = lease.get("spec") or {}
        self._observe(spec)
        holder = spec.get("holderIdentity") or ""
        expires_in = self._expires_in()
        if expires_in is not None and expires_in > 0:
            return False
        new_spec = self._spec(now, acquire_time=now, transitions=spec.get("leaseTransitions", 0))
        if holder == self.identity:
            new_spec["acquireTime"] = spec.get("acquireTime") or new_spec["acquireTime"]
        else:
            new_spec["leaseTransitions"] = int(new_spec["leaseTransitions"] or 0) + 1
        lease["spec"] = new_spec
        return self._write("PUT", self._path, lease)

    def _create(self, now: datetime) -> bool:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.lease_name, "namespace": self.namespace},
            "spec": self._spec(now, acquire_time=now, transitions=0),
        }
        collection = self._path.rsplit("/", 1)[0]
        return self._write("POST", collection, body)

    def _send(
        self, method: str, path: str, body: Any = None, *, at_most: float | None = None
    ) -> dict[str, Any]:
        timeout = self._timeout()
        if timeout is None:
            raise TimeoutError("past the leading deadline: not sent")
        if at_most is not None:
            timeout = min(timeout, at_most)
        return self._clients.request_json(method, path, body=body, timeout=timeout)

    def _write(self, method: str, path: str, lease: dict[str, Any]) -> bool:
        try:
            written = self._send(method, path, lease)
        except ApiError as e:
            if e.status != HTTPStatus.CONFLICT:
                log.warning("writing lease %s: HTTP %s %s", self.lease_name, e.status, e.reason)
            return False
        except (HTTPError, OSError) as e:
            log.warning("writing lease %s: %s", self.lease_name, e)
            return False
        self._observe(written.get("spec") or {})
        self._written = written
        self._renewed(self._attempt_started)
        return True

    def _release(self) -> None:
        try:
            lease = self._send("GET", self._path, at_most=self._config.retry_period)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
                return
            now = self._clock.now()
            lease["spec"] = {
                "holderIdentity": "",
                "leaseDurationSeconds": 1,
                "acquireTime": _micro_time(now),
                "renewTime": _micro_time(now),
                "leaseTransitions": spec.get("leaseTransitions", 0),
            }
            self._send("PUT", self._path, lease, at_most=self._config.retry_period)
        except (ApiError, HTTPError, OSError) as e:
            log.warning(
                "releasing lease %s failed (it will expire instead): %s", self.lease_name, e
            )

    def _spec(self, now: datetime, *, acquire_time: datetime, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": written_lease_seconds(self._config.lease_duration),
            "acquireTime": _micro_time(acquire_time),
            "renewTime": _micro_time(now),
            "leaseTransitions": transitions,
        }

    def heard(self, spec: dict[str, Any]) -> None:
        """The Lease's spec as a watch just delivered it. A watch may deliver a change after a
        read saw a later one; that only times the later one again, later: never sooner than
        it was written."""
        self._observe(spec)

    def _observe(self, spec: dict[str, Any]) -> None:
        with self._observed_lock:
            if spec != self._observed_spec:
                self._observed_spec = dict(spec)
                self._observed_at = self._clock.monotonic()

    def _call(self, callback: Callable[[], None] | None, name: str) -> None:
        if callback is None:
            return
        try:
            callback()
        except Exception:
            log.exception("leader election callback %s failed", name)
