"""Burst and release: N WaitForFirstConsumer claims, each with a consumer pod, created at once
over M nodes with the helper pods run for real; then all of them deleted.

Burst figures: time until every claim is Bound; per-claim latency (creation to Bound, from the
claim watch); the provisioner's API requests per volume (audit log, by its user agent); its CPU
seconds and peak RSS. Release: time until every PV and every directory is gone.

With capacity on (ours only), the burst starts once the initial CSIStorageCapacity objects are
published (one per node and class), so the figures count what the burst itself costs: the
CSIStorageCapacity writes per volume from the audit log (create/update/patch/delete on
csistoragecapacities by ours' user agent), cross-checked with ours' own counter
`local_path_csistoragecapacity_writes_total` read before and after the same window.
"""

from __future__ import annotations

import math
import re
import time
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.api import RawApi
from bench.audit import (
    BINDER_USER_AGENT_SUFFIX,
    AuditLog,
    controller_manager_limit,
    limiter_floor,
)
from bench.capacity import CLAIM_SIZE, WRITES_METRIC, capacity_writes, counter_total
from bench.implementations import Implementation, RunningProvisioner
from bench.process_stats import ProcessMonitor
from bench.stats import Latencies
from bench.timeline import ObjectTimeline
from bench.workspace import (
    BURST_CLASS,
    CLAIM_NAMESPACE,
    CLASSES,
    PROVISIONER_NAMESPACE,
    Workspace,
    volume_directories,
)
from localcluster import HELPER_POD_LABEL, HELPER_POD_LABEL_VALUE
from provisioner.helper_pods.batch_pod_shapes import batch_volume_names, volume_container_name
from provisioner.helper_pods.pod_shapes import HelperAction
from provisioner.provisioning.annotations import SELECTED_NODE

HOSTNAME_LABEL = "kubernetes.io/hostname"
SETTLE_SECONDS = 2.0
KWOK_APP_IMAGE = "registry.invalid/app:1"
"""The consumers' image on kwok nodes, which never pull it; real nodes need one they can run."""
CLAIMS_PATH = f"/api/v1/namespaces/{CLAIM_NAMESPACE}/persistentvolumeclaims"
CONSUMERS_PATH = f"/api/v1/namespaces/{CLAIM_NAMESPACE}/pods"
_VOLUME_UID = re.compile(r"pvc-([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})")


@dataclass
class BurstResult:
    implementation: str
    claims: int
    ready_seconds: float
    bind_seconds: float
    latency: Latencies
    helper_run: Latencies
    overhead: Latencies
    """Per claim: its latency minus its own setup helper's run (pod created to Succeeded)."""
    requests_per_volume: float
    requests: dict[str, int]
    stages: dict[str, Latencies]
    """Per claim, by stage (`STAGES`): creation to node selected (scheduler), node selected to
    its helper's end and from there to PV created (provisioner), PV created to Bound
    (kube-controller-manager)."""
    cluster_writes: int
    """Writes by every client (bench, scheduler, controllers, kwok, harness, provisioner)
    between the first claim and the last Bound: what the floor replays."""
    cpu_seconds: float
    peak_rss_mib: float
    release_seconds: float
    release_requests_per_volume: float
    release_requests: dict[str, int] = field(default_factory=dict)
    capacity_objects: int = 0
    """CSIStorageCapacity objects published before the burst (capacity on only)."""
    capacity_writes_per_volume: float = 0.0
    """Writes on csistoragecapacities by the provisioner in the burst (audit log)."""
    capacity_writes_metric_per_volume: float = math.nan
    """The same from ours' counter (NaN for the reference, which has none)."""
    release_capacity_writes_per_volume: float = 0.0
    binder_requests: int = 0
    """Requests by kube-controller-manager's PV binder (binds, claim annotations, events, event
    count patches) from the first claim to the last Bound. Under its default limit this is the
    limit's whole budget for the window when the binder paces the burst."""
    binder_needed: int = 0
    """Of those, the ones each claim needs once: all but the patches that count an event again
    (the binder repeats its ExternalProvisioning event while a claim waits)."""
    binder_floor_seconds: float = math.nan
    """The least time the binder's client limit lets the needed requests through
    (`audit.limiter_floor`): no implementation's burst binds faster against this binder."""
    helper_pods: list[tuple[int, float]] = field(default_factory=list)
    """Every helper pod of the burst and the release seen to end: (containers, created to
    Succeeded in seconds), to set beside the pod start model on real nodes."""
    consumer_start: Latencies = field(default_factory=lambda: Latencies.of([]))
    """Per consumer, its node's start of it: bound to a node to Running (`consumer_starts`);
    measured on real nodes only (the bursts run with `wait_consumers`)."""
    hostpath_consumer_start: Latencies = field(default_factory=lambda: Latencies.of([]))
    """The same number of consumers with a hostPath volume each, created at once on the same
    nodes right after a CSI burst (`hostpath_control`); empty for any other burst."""
    release_stages: dict[str, Latencies] = field(default_factory=dict)
    """Per claim, by stage of its release (`RELEASE_STAGES`)."""
    binder_all_floor_seconds: float = math.nan
    """The least time the binder's client limit lets through every request it made, its
    patches of its own repeated events included (`binder_floor_seconds` leaves them out)."""


def _claim(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "storageClassName": BURST_CLASS,
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": CLAIM_SIZE}},
        },
    }


def consumer(name: str, claim: str, image: str, node: str | None = None) -> dict[str, Any]:
    """A claim's consumer pod; on `node` by a nodeSelector (the scheduler still selects it, so
    the claim's selected-node annotation is set as for any pod), else wherever it schedules."""
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "app",
                "image": image,
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            }
        ],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
    }
    if node is not None:
        spec["nodeSelector"] = {HOSTNAME_LABEL: node}
    return {"metadata": {"name": name}, "spec": spec}


def spread(index: int, nodes: Sequence[str]) -> str | None:
    """The node of the `index`th consumer: the nodes in turn, None (the scheduler's pick)
    without any."""
    return nodes[index % len(nodes)] if nodes else None


def helper_pod_containers(pod: dict[str, Any]) -> int:
    """The containers a helper pod runs in sequence: its init containers and its containers."""
    spec = pod.get("spec") or {}
    return len(spec.get("initContainers") or ()) + len(spec.get("containers") or ())


def helper_pod_starts(pods: ObjectTimeline) -> list[tuple[int, float]]:
    """(containers, created to Succeeded or Failed in seconds) of each helper pod seen to end,
    from a timeline kept by `helper_pod_containers`: what a kubelet took to run it."""
    return sorted(
        (pods.kept.get(name, 0), finished - pods.first_seen[name])
        for name, finished in pods.reached["finished"].items()
    )


def _is_bound(claim: dict[str, Any]) -> bool:
    return bool(claim.get("status", {}).get("phase") == "Bound")


def _has_node(claim: dict[str, Any]) -> bool:
    return SELECTED_NODE in (claim["metadata"].get("annotations") or {})


def _is_scheduled(pod: dict[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName"))


def _is_running(pod: dict[str, Any]) -> bool:
    return bool(pod.get("status", {}).get("phase") == "Running")


def consumer_starts(scheduled: dict[str, float], running: dict[str, float]) -> list[float]:
    """Each consumer's start by its node's kubelet: from the pod seen bound to the node to it
    seen Running (its sandbox, its volume's mount, its container), for the consumers seen at
    both. The scheduler binds a consumer only once its claim is Bound, so this leaves out the
    provisioning and holds what the volume's kind costs the start: a hostPath mount, or the
    node plugin's NodePublishVolume."""
    return sorted(running[name] - at for name, at in scheduled.items() if name in running)


def watch_consumers(api: RawApi) -> ObjectTimeline:
    """When each consumer was seen bound to its node and Running."""
    milestones = {"scheduled": _is_scheduled, "running": _is_running}
    return ObjectTimeline(api, CONSUMERS_PATH, milestones).start()


def _consumers_started(
    consumers: ObjectTimeline, claims: int, wait: bool, timeout: float
) -> list[float]:
    """The consumers' starts (`consumer_starts`), once all `claims` of them run when `wait`."""
    if wait:
        consumers.wait_until(
            lambda: consumers.reached_count("running") >= claims,
            timeout,
            f"{claims} consumers Running",
        )
    return consumer_starts(dict(consumers.reached["scheduled"]), dict(consumers.reached["running"]))


def _is_finished(pod: dict[str, Any]) -> bool:
    return pod.get("status", {}).get("phase") in ("Succeeded", "Failed")


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Polls `condition` every 50 ms; TimeoutError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.05)


def _metric_writes(provisioner: RunningProvisioner) -> float:
    """Ours' CSIStorageCapacity write counter, summed over operations (NaN: the reference)."""
    if provisioner.implementation.reference:
        return math.nan
    url = f"http://127.0.0.1:{provisioner.port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        return counter_total(response.read().decode(), WRITES_METRIC)


def _wait_for_capacities(api: RawApi, timeout: float) -> int:
    """Until ours has published one CSIStorageCapacity per node and class; how many."""
    path = f"/apis/storage.k8s.io/v1/namespaces/{PROVISIONER_NAMESPACE}/csistoragecapacities"
    expected = len(api.get("/api/v1/nodes").get("items") or ()) * len(CLASSES)
    wait_until(
        lambda: len(api.get(path).get("items") or ()) >= expected,
        timeout,
        f"{expected} CSIStorageCapacity objects",
    )
    return expected


def _capacity_baseline(api: RawApi, provisioner: RunningProvisioner) -> tuple[int, float]:
    """Before the burst's window opens: with capacity on, wait for the initial objects (and
    let the last of their writes land); the objects published and ours' write counter."""
    objects = 0
    if provisioner.implementation.capacity:
        objects = _wait_for_capacities(api, 60)
        time.sleep(SETTLE_SECONDS)
    return objects, _metric_writes(provisioner)


def served_volumes(pod: dict[str, Any]) -> tuple[str, tuple[str, ...]]:
    """A helper pod's action ("create", "delete", ...) and the UIDs of the volumes it serves:
    both implementations name a helper pod after its action and, when it serves one volume, that
    volume; ours lists the volumes of a pod that serves several in an annotation."""
    name = pod["metadata"]["name"]
    action = next((a for a in ("create", "delete") if f"-{a}-" in name), "")
    names = " ".join([name, *batch_volume_names(pod)])
    return action, tuple(dict.fromkeys(m.group(1) for m in _VOLUME_UID.finditer(names)))


def volumes_done(pod: dict[str, Any]) -> list[str]:
    """The UIDs of the volumes whose own container in ours' shared helper pod has ended (each
    has one, in the order of the pod's volumes): a volume's helper run ends there, not when the
    pod's last volume is done."""
    kind, _ = served_volumes(pod)
    names = batch_volume_names(pod)
    action: HelperAction = "delete" if kind == "delete" else "create"
    if kind != action or not names:
        return []
    statuses = (pod.get("status") or {}).get("initContainerStatuses") or ()
    ended = {s.get("name") for s in statuses if (s.get("state") or {}).get("terminated")}
    return [
        match.group(1)
        for index, name in enumerate(names)
        if volume_container_name(action, index) in ended
        for match in [_VOLUME_UID.search(name)]
        if match
    ]


def helper_runs(helpers: ObjectTimeline, action: str) -> dict[str, tuple[float, float]]:
    """Volume UID -> (its helper pod's creation, its end) for one action; with several pods for
    one volume (a retry), the one that ended last. In a shared pod a volume's end is its own
    container's, where that was seen."""
    runs: dict[str, tuple[float, float]] = {}
    for name, finished in helpers.reached["finished"].items():
        pod_action, uids = helpers.kept.get(name, ("", ()))
        if pod_action != action:
            continue
        for uid in uids:
            ended = min(finished, helpers.part_done.get(uid, finished))
            if uid not in runs or ended > runs[uid][1]:
                runs[uid] = (helpers.first_seen[name], ended)
    return runs


@dataclass(frozen=True)
class ClaimMoments:
    """When one claim passed each stage (wall-clock seconds); None where not seen."""

    created: float
    node_selected: float | None
    helper_done: float | None
    volume_created: float | None
    bound: float | None


STAGES = (
    "created to node selected",
    "node selected to helper done",
    "helper done to PV created",
    "node selected to PV created",
    "PV created to Bound",
)


def stage_latencies(moments: list[ClaimMoments]) -> dict[str, Latencies]:
    """Per stage, its latency over the claims that passed both its ends: the scheduler (created
    to node selected), the provisioner up to its helper's end, the provisioner from there to the
    PV, the two together, and kube-controller-manager's binder (PV created to Bound)."""
    return latencies_by_stage(
        STAGES,
        [
            (
                (m.created, m.node_selected),
                (m.node_selected, m.helper_done),
                (m.helper_done, m.volume_created),
                (m.node_selected, m.volume_created),
                (m.volume_created, m.bound),
            )
            for m in moments
        ],
    )


Span = tuple[float | None, float | None]


def latencies_by_stage(
    stages: Sequence[str], spans: Sequence[Sequence[Span]]
) -> dict[str, Latencies]:
    """Per stage, the latency of each item's span of it (its start and end, in `stages`'
    order) where both ends were seen."""
    seen: dict[str, list[float]] = {stage: [] for stage in stages}
    for item in spans:
        for stage, (start, end) in zip(stages, item, strict=True):
            if start is not None and end is not None:
                seen[stage].append(end - start)
    return {stage: Latencies.of(values) for stage, values in seen.items()}


RELEASE_STAGES = (
    "release: deleted to consumer gone",
    "consumer gone to claim gone",
    "claim gone to PV Released",
    "PV Released to PV gone",
)


@dataclass(frozen=True)
class ReleaseMoments:
    """When one claim's release passed each point (None: not seen)."""

    deleted: float
    consumer_gone: float | None
    claim_gone: float | None
    volume_released: float | None
    volume_gone: float | None


def release_latencies(moments: list[ReleaseMoments]) -> dict[str, Latencies]:
    """Per release stage, its latency over the claims seen at both its ends: the consumer's
    kubelet (its pod's teardown), the claim's protection letting go once no pod uses it,
    kube-controller-manager's binder releasing the PV, and the provisioner's teardown (for a
    CSI volume: the gate's permit, the node plugin's removal and mark, the PV's DELETE)."""
    return latencies_by_stage(
        RELEASE_STAGES,
        [
            (
                (m.deleted, m.consumer_gone),
                (m.consumer_gone, m.claim_gone),
                (m.claim_gone, m.volume_released),
                (m.volume_released, m.volume_gone),
            )
            for m in moments
        ],
    )


def _delete_claims(api: RawApi, names: Sequence[str], concurrency: int) -> dict[str, float]:
    """Each claim and its consumer deleted, from `concurrency` threads; when each was."""
    deleted: dict[str, float] = {}

    def delete(name: str) -> None:
        deleted[name] = time.time()
        api.delete(f"{CONSUMERS_PATH}/{name.replace('claim', 'app')}")
        api.delete(f"{CLAIMS_PATH}/{name}")

    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(delete, names))
    return deleted


def _release_stages(
    deleted: dict[str, float],
    consumers: ObjectTimeline,
    claims: ObjectTimeline,
    volumes: ObjectTimeline,
) -> dict[str, Latencies]:
    """`release_latencies` of the claims deleted at the given times, from the burst's watches."""
    moments = []
    for name, at in deleted.items():
        volume = f"pvc-{claims.uid.get(name, '')}"
        moments.append(
            ReleaseMoments(
                deleted=at,
                consumer_gone=consumers.deleted.get(name.replace("claim", "app")),
                claim_gone=claims.deleted.get(name),
                volume_released=volumes.reached["released"].get(volume),
                volume_gone=volumes.deleted.get(volume),
            )
        )
    return release_latencies(moments)


def _is_released(volume: dict[str, Any]) -> bool:
    return bool(volume.get("status", {}).get("phase") == "Released")


def _stages(
    claims: ObjectTimeline,
    volumes: ObjectTimeline,
    created: dict[str, float],
    runs: dict[str, tuple[float, float]],
) -> dict[str, Latencies]:
    moments = []
    for name, at in created.items():
        uid = claims.uid.get(name, "")
        moments.append(
            ClaimMoments(
                created=at,
                node_selected=claims.reached["node-selected"].get(name),
                helper_done=runs[uid][1] if uid in runs else None,
                volume_created=volumes.first_seen.get(f"pvc-{uid}"),
                bound=claims.reached["bound"].get(name),
            )
        )
    return stage_latencies(moments)


def _overheads(
    latencies: dict[str, float], uids: dict[str, str], runs: dict[str, tuple[float, float]]
) -> Latencies:
    """Per claim: its latency minus its own setup helper's run."""
    return Latencies.of(
        [
            latency - (runs[uids[name]][1] - runs[uids[name]][0])
            for name, latency in latencies.items()
            if uids.get(name) in runs
        ]
    )


def _writes_and_binder_requests(
    audit: AuditLog, since: float, until: float
) -> tuple[int, int, int]:
    """Writes by every client, and the PV binder's requests, all and needed, in [since, until]."""
    binder = audit.count(since, until, user_agent_suffix=BINDER_USER_AGENT_SUFFIX)
    needed = binder.total - binder.by_kind["patch events"]
    return audit.count(since, until).writes, binder.total, needed


def _watch_helper_pods(api: RawApi) -> tuple[ObjectTimeline, ObjectTimeline]:
    """Two watches on the helper pods: by the volumes each serves (and when each volume's part
    ended), and by how many containers each runs."""
    path = f"/api/v1/namespaces/{PROVISIONER_NAMESPACE}/pods"
    selector = f"{HELPER_POD_LABEL}={HELPER_POD_LABEL_VALUE}"
    by_volume = ObjectTimeline(
        api,
        path,
        {"finished": _is_finished},
        label_selector=selector,
        keep=served_volumes,
        parts_done=volumes_done,
    ).start()
    by_containers = ObjectTimeline(
        api,
        path,
        {"finished": _is_finished},
        label_selector=selector,
        keep=helper_pod_containers,
    ).start()
    return by_volume, by_containers


def run_burst(
    workspace: Workspace,
    api: RawApi,
    audit: AuditLog,
    implementation: Implementation,
    *,
    claims: int,
    concurrency: int,
    log_dir: Path,
    py_spy: Path | None = None,
    timeout: float,
    binder_limit: tuple[int, int] = controller_manager_limit(None),
    nodes: Sequence[str] = (),
    consumer_image: str = KWOK_APP_IMAGE,
    wait_consumers: bool = False,
) -> BurstResult:  # binder_limit: kube-controller-manager's client QPS and burst here; nodes:
    # the consumers go to these in turn (`spread`), else where the scheduler places them
    claim_timeline = ObjectTimeline(
        api, CLAIMS_PATH, {"bound": _is_bound, "node-selected": _has_node}
    ).start()
    helper_timeline, pod_timeline = _watch_helper_pods(api)
    volume_timeline = ObjectTimeline(
        api, "/api/v1/persistentvolumes", {"released": _is_released}
    ).start()
    consumer_timeline = watch_consumers(api)
    provisioner = RunningProvisioner(
        implementation, workspace, log_dir / f"{implementation.key}-burst.log", py_spy
    )
    try:
        ready = provisioner.wait_ready()
        capacity_objects, metric_before = _capacity_baseline(api, provisioner)
        monitor = ProcessMonitor(provisioner.pid).start()
        cpu_before = monitor.cpu_seconds()
        names = [f"claim-{index:05d}" for index in range(claims)]
        created: dict[str, float] = {}

        def create(name: str, node: str | None) -> None:
            created[name] = time.time()
            api.create(CLAIMS_PATH, _claim(name))
            api.create(
                CONSUMERS_PATH, consumer(name.replace("claim", "app"), name, consumer_image, node)
            )

        started = time.time()
        with ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(create, names, [spread(i, nodes) for i in range(claims)]))
        claim_timeline.wait_until(
            lambda: claim_timeline.reached_count("bound") >= claims,
            timeout,
            f"{claims} claims Bound",
        )
        bound = claim_timeline.reached["bound"]
        last_bound = max(bound[name] for name in names)
        helper_timeline.wait_until(lambda: helper_timeline.live() == 0, 120, "helper pods gone")
        time.sleep(SETTLE_SECONDS)
        quiet = time.time()
        cpu_seconds = monitor.cpu_seconds() - cpu_before
        metric_after = _metric_writes(provisioner)
        requests = audit.count(started, quiet, implementation.user_agent_prefix)
        cluster_writes, binder, needed = _writes_and_binder_requests(audit, started, last_bound)
        latencies = {name: bound[name] - created[name] for name in names}
        runs = helper_runs(helper_timeline, "create")
        stages = _stages(claim_timeline, volume_timeline, created, runs)
        # After the requests' window: a consumer's start asks nothing of the provisioner.
        started_consumers = _consumers_started(consumer_timeline, claims, wait_consumers, timeout)

        release_started = time.time()

        deleted = _delete_claims(api, names, concurrency)
        wait_until(
            lambda: volume_timeline.live() == 0 and volume_directories(workspace.cluster) == 0,
            timeout,
            "every PV and directory gone",
        )
        released = time.time()
        release_stages = _release_stages(
            deleted, consumer_timeline, claim_timeline, volume_timeline
        )
        helper_timeline.wait_until(lambda: helper_timeline.live() == 0, 120, "helper pods gone")
        time.sleep(SETTLE_SECONDS)
        release_requests = audit.count(
            release_started, time.time(), implementation.user_agent_prefix
        )
        peak_rss = monitor.peak_rss_mib()
        monitor.stop()
    finally:
        provisioner.stop()
        for timeline in (
            claim_timeline,
            helper_timeline,
            pod_timeline,
            volume_timeline,
            consumer_timeline,
        ):
            timeline.stop()
    return BurstResult(
        implementation=implementation.key,
        claims=claims,
        ready_seconds=ready,
        bind_seconds=last_bound - started,
        latency=Latencies.of(list(latencies.values())),
        helper_run=Latencies.of([end - start for start, end in runs.values()]),
        overhead=_overheads(latencies, claim_timeline.uid, runs),
        requests_per_volume=requests.total / claims,
        requests=dict(requests.by_kind.most_common()),
        stages=stages,
        cluster_writes=cluster_writes,
        binder_requests=binder,
        binder_needed=needed,
        binder_floor_seconds=limiter_floor(needed, *binder_limit),
        binder_all_floor_seconds=limiter_floor(binder, *binder_limit),
        cpu_seconds=cpu_seconds,
        peak_rss_mib=peak_rss,
        release_seconds=released - release_started,
        release_requests_per_volume=release_requests.total / claims,
        release_requests=dict(release_requests.by_kind.most_common()),
        capacity_objects=capacity_objects,
        capacity_writes_per_volume=capacity_writes(requests) / claims,
        capacity_writes_metric_per_volume=(metric_after - metric_before) / claims,
        release_capacity_writes_per_volume=capacity_writes(release_requests) / claims,
        helper_pods=helper_pod_starts(pod_timeline),
        consumer_start=Latencies.of(started_consumers),
        release_stages=release_stages,
    )
