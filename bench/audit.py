"""Counting each client's API requests from the apiserver's audit log.

Why: kube-apiserver's `apiserver_request_total` has no user or user-agent label (its labels are
verb, group, version, resource, subresource, scope, component, code), so it cannot say which
requests a provisioner made. The audit log can: with a policy that records every request once,
at the RequestReceived stage, each line names the user agent, the verb and the resource.

The harness has no option for extra component flags, so the cluster is started with
`localcluster.component_args.apiserver_args` (and, when asked, `controller_manager_args`)
wrapped for the duration of the start, when the harness builds the command lines; nothing else
in the harness changes. Raising kube-controller-manager's client QPS (default 20, burst 30) is
optional: its PV binder writes several times per claim and is otherwise what paces a burst.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from localcluster import ClusterOptions, LocalCluster, NodeSpec, component_args
from localcluster.pod_start import FAST, PodStartModel

AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [ResponseStarted, ResponseComplete, Panic]
rules:
- level: Metadata
"""
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
BINDER_USER_AGENT_SUFFIX = ":persistent-volume-binder"
"""kube-controller-manager's PV binder (its service account ends its user agent)."""
CONTROLLER_MANAGER_QPS, CONTROLLER_MANAGER_BURST = 20, 30
"""kube-controller-manager's client limit by default (--kube-api-qps, --kube-api-burst)."""


def controller_manager_limit(qps: int | None) -> tuple[int, int]:
    """kube-controller-manager's client QPS and burst in a cluster started with
    `controller_manager_qps=qps`: its defaults, or `qps` and a burst of twice that."""
    return (qps, 2 * qps) if qps else (CONTROLLER_MANAGER_QPS, CONTROLLER_MANAGER_BURST)


def limiter_floor(requests: int, qps: float, burst: int) -> float:
    """The least time a client-go token bucket (`qps` a second, `burst` at once) takes to let
    `requests` requests through: the first `burst` at once, the rest at `qps`."""
    return max(0, requests - burst) / qps


@contextmanager
def _extra_flags(apiserver: list[str], controller_manager: list[str]) -> Iterator[None]:
    original_apiserver = component_args.apiserver_args
    original_controller_manager = component_args.controller_manager_args

    def apiserver_args(*args: Any, **kwargs: Any) -> list[str]:
        return [*original_apiserver(*args, **kwargs), *apiserver]

    def controller_manager_args(*args: Any, **kwargs: Any) -> list[str]:
        return [*original_controller_manager(*args, **kwargs), *controller_manager]

    component_args.apiserver_args = apiserver_args
    component_args.controller_manager_args = controller_manager_args
    try:
        yield
    finally:
        component_args.apiserver_args = original_apiserver
        component_args.controller_manager_args = original_controller_manager


def start_audited_cluster(
    nodes: Sequence[NodeSpec],
    work_dir: Path,
    controller_manager_qps: int | None = None,
    pod_start: PodStartModel = FAST,
    controller_manager_flags: Sequence[str] = (),
    *,
    real_nodes: int = 0,
) -> tuple[LocalCluster, AuditLog]:
    """A fresh local cluster whose apiserver writes every request to an audit log;
    `controller_manager_flags` come after the harness's own, so they override them;
    `real_nodes` real nodes (real-1, ...) beside `nodes` (needs root, and no other cluster
    with real nodes on the machine)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    policy = work_dir / "audit-policy.yaml"
    policy.write_text(AUDIT_POLICY)
    log = work_dir / "audit.log"
    log.unlink(missing_ok=True)
    audit = [
        f"--audit-policy-file={policy}",
        f"--audit-log-path={log}",
        "--audit-log-format=json",
        "--audit-log-maxsize=0",
    ]
    controller_manager = []
    if controller_manager_qps:
        qps, burst = controller_manager_limit(controller_manager_qps)
        controller_manager = [f"--kube-api-qps={qps}", f"--kube-api-burst={burst}"]
    controller_manager += controller_manager_flags
    with _extra_flags(audit, controller_manager):
        cluster = LocalCluster.start(
            ClusterOptions(
                nodes=tuple(nodes), announce=False, pod_start=pod_start, real_nodes=real_nodes
            )
        )
    return cluster, AuditLog(log)


@dataclass
class RequestCounts:
    """Requests by "verb resource[/subresource]"."""

    by_kind: Counter[str] = field(default_factory=Counter)
    user_agents: set[str] = field(default_factory=set)

    @property
    def total(self) -> int:
        return sum(self.by_kind.values())

    @property
    def writes(self) -> int:
        return sum(n for kind, n in self.by_kind.items() if kind.split(" ", 1)[0] in WRITE_VERBS)

    def per(self, volumes: int) -> dict[str, float]:
        return {kind: n / volumes for kind, n in self.by_kind.most_common()} if volumes else {}


def _timestamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class AuditLog:
    def __init__(self, path: Path) -> None:
        self.path = path

    def count(
        self,
        since: float,
        until: float,
        user_agent_prefix: str | None = None,
        *,
        user_agent_suffix: str | None = None,
    ) -> RequestCounts:
        """Requests received in [since, until] (wall-clock seconds), optionally only those
        whose user agent starts with `user_agent_prefix` or ends with `user_agent_suffix`."""
        counts = RequestCounts()
        if not self.path.exists():
            return counts
        with self.path.open() as lines:
            for line in lines:
                event = json.loads(line)
                agent = str(event.get("userAgent", ""))
                if user_agent_prefix is not None and not agent.startswith(user_agent_prefix):
                    continue
                if user_agent_suffix is not None and not agent.endswith(user_agent_suffix):
                    continue
                if not since <= _timestamp(event["requestReceivedTimestamp"]) <= until:
                    continue
                reference = event.get("objectRef") or {}
                resource = reference.get("resource") or event.get("requestURI", "?").split("?")[0]
                if reference.get("subresource"):
                    resource += "/" + reference["subresource"]
                counts.by_kind[f"{event['verb']} {resource}"] += 1
                counts.user_agents.add(agent)
        return counts
