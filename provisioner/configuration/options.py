"""Command-line flags, each with an environment-variable fallback named as rancher's.

Users switching from rancher/local-path-provisioner keep their Deployment env
(PROVISIONER_NAME, POD_NAMESPACE, CONFIG_PATH, HELPER_POD_FILE, SERVICE_ACCOUNT_NAME, ...).
Precedence: flag > environment > default.

Pure (argv and the environment go in): the runtime parses its own command line with it, and the
policy pack the command line and env a Deployment gives the provisioner, so both read
`--allow-unsafe`, `ALLOW_UNSAFE_HELPER_TEMPLATE=on` or a leading `start` the same way.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from provisioner.configuration import defaults
from provisioner.helper_pods.batch_pod_shapes import MAX_BATCH_VOLUMES
from provisioner.version import VERSION

DEFAULT_PROVISIONER_NAME = defaults.PROVISIONER_NAME
ORPHANS_COMMAND = "orphans"
_LABEL_PAIR = r"[A-Za-z0-9][-A-Za-z0-9_./]*=[-A-Za-z0-9_.]*"
_EQUALITY_SELECTOR = re.compile(rf"{_LABEL_PAIR}(,{_LABEL_PAIR})*")
"""Equality-based label selectors (key=value, commas between): all a predecessor's pods need;
the API server checks the names themselves."""
"""`python -m provisioner orphans ...` runs the orphans command, not the provisioner."""


class OptionsError(ValueError):
    """The command line the provisioner would refuse (it prints this and exits with 2)."""


@dataclass(frozen=True)
class Options:
    provisioner_name: str
    namespace: str
    config_path: Path
    """config.json; the scripts and helperPod.yaml are read from the same directory."""
    helper_pod_file: Path | None
    configmap_name: str
    """The ConfigMap the config is mounted from (events about a refused config name it); helper
    pods get the validated scripts inline, never the ConfigMap's current files."""
    helper_service_account: str
    kubeconfig: str | None
    workers: int
    provisioning_retry_count: int
    deletion_retry_count: int
    kube_api_qps: float
    kube_api_burst: int
    metrics_address: str
    metrics_port: int
    leader_election: bool
    leader_election_namespace: str | None
    allow_unsafe_helper_template: bool
    debug: bool
    json_logs: bool
    node_scan_interval: float = defaults.NODE_SCAN_INTERVAL_SECONDS
    """Seconds between the leader's node scans (orphan and usage metrics); 0 turns them off."""
    pod_name: str = ""
    """This process's pod (the kubelet sets the hostname to it): on SIGTERM, its owner tells
    whether the installation is being removed."""
    helper_batch_size: int = defaults.HELPER_BATCH_SIZE
    """Volumes one helper pod serves at most on a busy node (1: a pod per volume)."""
    helper_pods_per_node: int = defaults.HELPER_PODS_PER_NODE
    """Setup (and teardown) helper pods running at once per node, at most."""
    leader_election_lease_duration: float = defaults.LEASE_DURATION_SECONDS
    """How long a standby waits after the leader's last renewal before it takes the lease."""
    leader_election_renew_deadline: float = defaults.RENEW_DEADLINE_SECONDS
    """The leader exits this long after its last successful renewal unless it renews again."""
    leader_election_retry_period: float = defaults.RETRY_PERIOD_SECONDS
    """Between renewals, and between a standby's attempts to take the lease."""
    helper_hold_timeout: float = defaults.HELPER_HOLD_TIMEOUT_SECONDS
    """Seconds a volume waits for a helper pod we did not start to go away."""
    predecessor_selector: str = ""
    """Label selector of the pods of a provisioner this one takes over (rancher's,
    `app=local-path-provisioner`): the leader provisions only once none of them, and no bare pod
    with a hostPath (rancher's helper pods), is left in --namespace, and exits when one appears
    while it leads (process/predecessors.py). Empty: no predecessor."""


def _env_bool(value: str) -> bool:
    return value.strip().lower() in {"1", "true", "yes", "on"}


def read_options(argv: Sequence[str], environ: Mapping[str, str]) -> Options:
    """`parse_options` for a reader of someone else's command line: raises OptionsError with
    what the provisioner would print, instead of printing and exiting."""
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said), contextlib.redirect_stdout(said):
            return parse_options(argv, environ)
    except SystemExit:
        raise OptionsError(said.getvalue().strip()) from None
    except ValueError as error:  # a number variable that is none: the provisioner stops on it
        raise OptionsError(str(error)) from None


def parse_options(
    argv: Sequence[str], environ: Mapping[str, str], *, hostname: str = ""
) -> Options:
    """Parses argv (without the program name); rancher's leading `start` command is accepted.
    `hostname` is the default of --pod-name (the kubelet sets a pod's hostname to its name)."""
    if argv and argv[0] == "start":
        argv = argv[1:]

    def env(name: str, default: str) -> str:
        return environ.get(name, default)

    parser = argparse.ArgumentParser(
        prog="local-path-storage-provisioner",
        description="Local-path storage provisioner for Kubernetes (rancher-compatible config).",
    )
    add = parser.add_argument
    # Which release runs: the image tag says so only until someone retags it.
    add("--version", action="version", version=f"%(prog)s {VERSION}")
    add(
        "--provisioner-name",
        default=env("PROVISIONER_NAME", DEFAULT_PROVISIONER_NAME),
        help="provisioner name the StorageClasses use [PROVISIONER_NAME]",
    )
    add(
        "--namespace",
        default=env("POD_NAMESPACE", env("NAMESPACE", "local-path-storage")),
        help="namespace helper pods and the leader Lease live in [POD_NAMESPACE]",
    )
    add(
        "--config",
        dest="config_path",
        default=env("CONFIG_PATH", "/etc/config/config.json"),
        help="config.json path; setup, teardown, helperPod.yaml beside it [CONFIG_PATH]",
    )
    add(
        "--helper-pod-file",
        default=env("HELPER_POD_FILE", ""),
        help="helper pod template, if not helperPod.yaml beside config.json [HELPER_POD_FILE]",
    )
    add(
        "--configmap-name",
        default=env("CONFIGMAP_NAME", defaults.CONFIG_MAP_NAME),
        help="the ConfigMap mounted at the --config directory; named in InvalidConfig events"
        " [CONFIGMAP_NAME]",
    )
    add(
        "--service-account-name",
        dest="helper_service_account",
        default=env("SERVICE_ACCOUNT_NAME", defaults.HELPER_SERVICE_ACCOUNT),
        help="service account of helper pods; it needs no rights [SERVICE_ACCOUNT_NAME]",
    )
    add(
        "--kubeconfig",
        default=env("KUBECONFIG", "") or None,
        help="kubeconfig path; default $KUBECONFIG, in-cluster, ~/.kube/config [KUBECONFIG]",
    )
    add(
        "--worker-threads",
        dest="workers",
        type=int,
        default=int(env("WORKER_THREADS", str(defaults.WORKERS))),
        help="concurrent reconcilers [WORKER_THREADS]",
    )
    add(
        "--helper-batch-size",
        type=int,
        default=int(env("HELPER_BATCH_SIZE", str(defaults.HELPER_BATCH_SIZE))),
        help="volumes that arrive for a node while its helper pod runs share its next one, "
        f"up to this many (at most {MAX_BATCH_VOLUMES}); 1 gives each volume its own pod "
        "[HELPER_BATCH_SIZE]",
    )
    add(
        "--helper-pods-per-node",
        type=int,
        default=int(env("HELPER_PODS_PER_NODE", str(defaults.HELPER_PODS_PER_NODE))),
        help="setup (and teardown) helper pods running at once per node, a volume each while "
        "slots are free; volumes that arrive while all are taken share the pods that follow, "
        "a fair share each "
        "[HELPER_PODS_PER_NODE]",
    )
    add(
        "--helper-hold-timeout",
        type=float,
        default=float(env("HELPER_HOLD_TIMEOUT", str(defaults.HELPER_HOLD_TIMEOUT_SECONDS))),
        help="seconds a volume waits for a helper pod this process did not start (deleted, but "
        "on an unreachable node or kept by a finalizer) before its helper fails with a Warning, "
        "or, for a shared filesystem, runs on another node [HELPER_HOLD_TIMEOUT]",
    )
    add(
        "--provisioning-retry-count",
        type=int,
        default=int(env("PROVISIONING_RETRY_COUNT", str(defaults.PROVISIONING_RETRY_COUNT))),
        help="give up provisioning a claim after this many failures until its next change or "
        "resync; 0 retries forever [PROVISIONING_RETRY_COUNT]",
    )
    add(
        "--deletion-retry-count",
        type=int,
        default=int(env("DELETION_RETRY_COUNT", str(defaults.DELETION_RETRY_COUNT))),
        help="the same for deleting a volume; 0 retries forever [DELETION_RETRY_COUNT]",
    )
    add(
        "--kube-api-qps",
        type=float,
        default=float(env("KUBE_API_QPS", "50")),
        help="client-side API request rate [KUBE_API_QPS]",
    )
    add(
        "--kube-api-burst",
        type=int,
        default=int(env("KUBE_API_BURST", "100")),
        help="client-side API burst [KUBE_API_BURST]",
    )
    add(
        "--metrics-address",
        default=env("METRICS_ADDRESS", "0.0.0.0"),  # noqa: S104
        help="address of /healthz, /readyz, /metrics [METRICS_ADDRESS]",
    )
    add(
        "--metrics-port",
        type=int,
        default=int(env("METRICS_PORT", str(defaults.METRICS_PORT))),
        help="port of /healthz, /readyz, /metrics; 0 picks a free one [METRICS_PORT]",
    )
    add(
        "--leader-election",
        default=_env_bool(env("LEADER_ELECTION", str(defaults.LEADER_ELECTION))),
        action=argparse.BooleanOptionalAction,
        help="elect one active replica on a Lease [LEADER_ELECTION]",
    )
    add(
        "--leader-election-namespace",
        default=env("LEADER_ELECTION_NAMESPACE", "") or None,
        help="namespace of the Lease; default --namespace [LEADER_ELECTION_NAMESPACE]",
    )
    for flag, variable, default, meaning in (
        (
            "lease-duration",
            "LEASE_DURATION",
            defaults.LEASE_DURATION_SECONDS,
            "a standby waits after the last renewal",
        ),
        (
            "renew-deadline",
            "RENEW_DEADLINE",
            defaults.RENEW_DEADLINE_SECONDS,
            "the leader exits after its last renewal",
        ),
        (
            "retry-period",
            "RETRY_PERIOD",
            defaults.RETRY_PERIOD_SECONDS,
            "between renewals and attempts to take the lease",
        ),
    ):
        add(
            f"--leader-election-{flag}",
            type=float,
            default=float(env(f"LEADER_ELECTION_{variable}", str(default))),
            help=f"seconds {meaning} [LEADER_ELECTION_{variable}]",
        )
    add(
        "--allow-unsafe-helper-template",
        action="store_true",
        default=_env_bool(env("ALLOW_UNSAFE_HELPER_TEMPLATE", "false")),
        help="trust helperPod.yaml without the safety checks [ALLOW_UNSAFE_HELPER_TEMPLATE]",
    )
    add(
        "--pod-name",
        default=env("POD_NAME", "") or hostname,
        help="this process's pod; default the hostname, which the kubelet sets to it [POD_NAME]",
    )
    add(
        "--node-scan-interval",
        type=float,
        default=float(env("NODE_SCAN_INTERVAL", str(defaults.NODE_SCAN_INTERVAL_SECONDS))),
        help="seconds between the leader's scans of the nodes for orphans and volume usage"
        " (metrics, and a Warning on a claim whose volume outgrew its size), the first one"
        " 5 minutes after it starts leading (or one interval if shorter); 0 turns them off"
        " [NODE_SCAN_INTERVAL]",
    )
    add(
        "--predecessor-selector",
        default=env("PREDECESSOR_SELECTOR", ""),
        help="label selector (key=value[,key=value]) of the pods of the provisioner this one"
        " takes over, e.g. rancher's app=local-path-provisioner: the leader provisions only once"
        " none of them, nor any pod that no controller owns and that mounts a hostPath (rancher's"
        " helper pods), is left in --namespace, and exits if one appears while it leads"
        " (rancher holds no lock to share) [PREDECESSOR_SELECTOR]",
    )
    add(
        "--debug",
        "-d",
        action="store_true",
        default=_env_bool(env("RANCHER_DEBUG", "false")),
        help="debug logging [RANCHER_DEBUG]",
    )
    add(
        "--json-logs",
        action="store_true",
        default=_env_bool(env("JSON_LOGS", "false")),
        help="one JSON object per log line [JSON_LOGS]",
    )
    ns = parser.parse_args(list(argv))
    # The order kube.leader_election.LeaderElectionConfig requires, checked here so a bad
    # command line is refused with the flags' names before anything starts.
    if not (
        0
        < ns.leader_election_retry_period
        < ns.leader_election_renew_deadline
        < ns.leader_election_lease_duration
    ):
        parser.error(
            "need 0 < --leader-election-retry-period < --leader-election-renew-deadline"
            " < --leader-election-lease-duration (seconds), got"
            f" {ns.leader_election_retry_period}, {ns.leader_election_renew_deadline},"
            f" {ns.leader_election_lease_duration}"
        )
    if ns.node_scan_interval < 0:
        parser.error("--node-scan-interval must be 0 (off) or a number of seconds")
    for flag in ("workers", "helper_batch_size", "helper_pods_per_node"):
        if getattr(ns, flag) < 1:
            name = "worker-threads" if flag == "workers" else flag.replace("_", "-")
            parser.error(f"--{name} must be at least 1, got {getattr(ns, flag)}")
    if ns.helper_hold_timeout <= 0:
        parser.error(f"--helper-hold-timeout must be above 0, got {ns.helper_hold_timeout:g}")
    if ns.predecessor_selector and not _EQUALITY_SELECTOR.fullmatch(ns.predecessor_selector):
        parser.error(
            f"--predecessor-selector {ns.predecessor_selector!r} is not a label selector of"
            " key=value pairs separated by commas (e.g. app=local-path-provisioner)"
        )
    if ns.helper_batch_size > MAX_BATCH_VOLUMES:
        parser.error(
            f"--helper-batch-size must be at most {MAX_BATCH_VOLUMES}, got"
            f" {ns.helper_batch_size}: the outcomes of a larger batch pod do not fit in what a"
            " kubelet keeps of its termination messages"
        )
    for flag in ("provisioning_retry_count", "deletion_retry_count"):
        if getattr(ns, flag) < 0:
            parser.error(f"--{flag.replace('_', '-')} must be 0 (forever) or more")
    return Options(
        provisioner_name=ns.provisioner_name,
        namespace=ns.namespace,
        config_path=Path(ns.config_path),
        helper_pod_file=Path(ns.helper_pod_file) if ns.helper_pod_file else None,
        configmap_name=ns.configmap_name,
        helper_service_account=ns.helper_service_account,
        kubeconfig=ns.kubeconfig,
        workers=ns.workers,
        provisioning_retry_count=ns.provisioning_retry_count,
        deletion_retry_count=ns.deletion_retry_count,
        kube_api_qps=ns.kube_api_qps,
        kube_api_burst=ns.kube_api_burst,
        metrics_address=ns.metrics_address,
        metrics_port=ns.metrics_port,
        leader_election=ns.leader_election,
        leader_election_namespace=ns.leader_election_namespace,
        allow_unsafe_helper_template=ns.allow_unsafe_helper_template,
        debug=ns.debug,
        json_logs=ns.json_logs,
        pod_name=ns.pod_name,
        node_scan_interval=ns.node_scan_interval,
        helper_batch_size=ns.helper_batch_size,
        helper_pods_per_node=ns.helper_pods_per_node,
        leader_election_lease_duration=ns.leader_election_lease_duration,
        leader_election_renew_deadline=ns.leader_election_renew_deadline,
        leader_election_retry_period=ns.leader_election_retry_period,
        helper_hold_timeout=ns.helper_hold_timeout,
        predecessor_selector=ns.predecessor_selector,
    )
