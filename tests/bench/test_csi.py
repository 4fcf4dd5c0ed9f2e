"""Ours with CSI volumes in the real-node benchmark, its pure parts: the node plugin's command
line and socket paths, the CSIDriver, the consumers' start, issue 38's goals judged on
hand-made runs, and their tables."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from bench.burst import (
    RELEASE_STAGES,
    BurstResult,
    ReleaseMoments,
    consumer_starts,
    release_latencies,
)
from bench.csi import CSI_PROVISIONER_NAME, csi_driver
from bench.goals import (
    CONSUMER_START,
    CSI_GOALS,
    csi_time_goes,
    judge_csi_all,
)
from bench.implementations import ALL, OURS_CSI
from bench.options import parse_options
from bench.real_nodes import host_taken, real_implementations
from bench.report import build_report, csi_goals_table, markdown, real_table, time_goes_tables
from bench.runner import RunResults
from bench.stats import Latencies
from localcluster.csi_node_plugins import NodePluginPlan, node_plugin_command, too_long_sockets
from localcluster.errors import ClusterError
from tests.bench.test_real_nodes import real_burst

KUBELET_ROOT = Path("/tmp/lps-cluster-abcdefgh/real-nodes/real-1/kubelet")


def plan(kubelet_root: Path = KUBELET_ROOT) -> NodePluginPlan:
    return NodePluginPlan(
        node="real-1",
        namespace_pid=4242,
        kubelet_root=kubelet_root,
        provisioner_name=CSI_PROVISIONER_NAME,
        config_file=Path("/work/config/config.json"),
        kubeconfig=Path("/tmp/lps-cluster-abcdefgh/kubeconfig"),
        health_port=9808,
        log=Path("/work/csi-node-real-1.log"),
    )


def test_the_plugin_runs_in_its_node_s_mount_namespace_managing_its_volumes() -> None:
    command = node_plugin_command(plan(), python="/venv/bin/python", working_dir=Path("/repo"))
    assert command[:5] == [
        "nsenter",
        "--mount=/proc/4242/ns/mnt",
        "--wd=/repo",
        "--",
        "/venv/bin/python",
    ]
    assert command[5:7] == ["-m", "provisioner.csi"]
    flags = command[7:]
    assert f"--kubelet-root={KUBELET_ROOT}" in flags
    assert f"--endpoint=unix://{KUBELET_ROOT}/plugins/csi.bench.io/csi.sock" in flags
    assert "--provisioner-name=bench.io/csi" in flags
    assert "--node-name=real-1" in flags
    assert "--config-file=/work/config/config.json" in flags
    assert "--kubeconfig=/tmp/lps-cluster-abcdefgh/kubeconfig" in flags
    assert "--health-port=9808" in flags
    assert "--manage-volumes" in flags


def test_the_driver_is_named_for_the_short_provisioner_name_and_its_sockets_fit() -> None:
    assert plan().driver == "csi.bench.io"
    assert plan().registration_socket == KUBELET_ROOT / "plugins_registry" / "csi.bench.io-reg.sock"
    assert too_long_sockets(plan()) == []
    deep = plan(Path("/tmp") / ("d" * 60) / "real-nodes/real-1/kubelet")
    assert too_long_sockets(deep) == [deep.endpoint_socket, deep.registration_socket]


def test_the_csi_driver_asks_no_attach_and_the_pod_s_details_and_applies_fs_group() -> None:
    driver = csi_driver(CSI_PROVISIONER_NAME)
    assert driver["metadata"]["name"] == "csi.bench.io"
    spec = driver["spec"]
    assert (spec["attachRequired"], spec["podInfoOnMount"], spec["fsGroupPolicy"]) == (
        False,
        True,
        "File",
    )


def test_ours_csi_runs_on_the_real_nodes_only() -> None:
    assert OURS_CSI in real_implementations(ALL)
    assert parse_options(["--only", "ours-csi"]).implementations == (OURS_CSI,)
    assert OURS_CSI in parse_options([]).implementations


def test_a_consumer_s_start_is_from_bound_to_its_node_to_running() -> None:
    scheduled = {"app-1": 10.0, "app-2": 11.0, "app-3": 12.0}
    running = {"app-1": 11.5, "app-2": 11.25, "app-4": 20.0}
    assert consumer_starts(scheduled, running) == [0.25, 1.5]
    assert consumer_starts({}, running) == []


def csi_burst(
    key: str,
    claims: int,
    *,
    bind: float,
    latency: float,
    requests: float = 3.0,
    consumer: float = 1.0,
    release: float = 5.0,
    binder_floor: float = 10.0,
    control: float = 1.0,
) -> BurstResult:
    result = real_burst(key, claims, bind, latency, requests)
    result.latency = Latencies(count=claims, p50=latency, p95=latency, p99=latency, max=latency)
    result.consumer_start = Latencies(count=claims, p50=consumer, p95=2, p99=2, max=2)
    result.hostpath_consumer_start = Latencies(count=claims, p50=control, p95=2, p99=2, max=2)
    result.release_seconds = release
    result.binder_floor_seconds = binder_floor
    return result


def csi_run(*, single: float = 1.0, consumer: float = 1.05) -> RunResults:
    """Ours-csi beside ours and the tuned reference at 1 and 40 claims, default limit: a claim
    Bound in `single` s against the reference's 3.0 s, 40 claims in 10.4 s against a 10 s
    binder floor, 3.1 requests a volume, consumers started in `consumer` s against 1.0 s for
    as many hostPath consumers at once (the helper-pod class's, arriving one by one: 0.5 s),
    released in 5 s against 20 s. Lifted: ours-csi alone, one claim."""
    default = {
        1: {
            "ours-csi": csi_burst("ours-csi", 1, bind=single, latency=single, requests=20.0),
            "ours": csi_burst("ours", 1, bind=2.4, latency=2.4),
            "reference-tuned": csi_burst("reference-tuned", 1, bind=3.0, latency=3.0),
        },
        40: {
            "ours-csi": csi_burst(
                "ours-csi", 40, bind=10.4, latency=9.0, requests=3.1, consumer=consumer
            ),
            "ours": csi_burst("ours", 40, bind=14.0, latency=13.0, consumer=0.5),
            "reference-tuned": csi_burst(
                "reference-tuned", 40, bind=18.0, latency=18.0, release=20.0
            ),
        },
    }
    lifted = {1: {"ours-csi": csi_burst("ours-csi", 1, bind=0.9, latency=0.9, requests=4.0)}}
    return RunResults(real={"default": default, "lifted": lifted})


def by_goal(run: RunResults) -> dict[str, dict[str, object]]:
    return {str(goal["goal"]): goal for goal in judge_csi_all(run.real)}


def test_each_csi_goal_is_held_against_its_comparison_in_the_same_run() -> None:
    goals = by_goal(csi_run())
    assert len(goals) == len(CSI_GOALS) == 10
    prefix = "CSI, default binder limit"
    single = goals[f"{prefix}, 1 claim: claim created to Bound"]
    assert (single["against"], single["against_value"]) == ("reference-tuned", 3.0)
    assert (single["value"], single["limit"], single["met"]) == (pytest.approx(1 / 3), 0.35, True)
    floor = goals[f"{prefix}, 40 claims: all Bound / the PV binder's floor"]
    assert (floor["against"], floor["against_value"]) == ("binder floor", 10.0)
    assert (floor["value"], floor["limit"], floor["met"]) == (pytest.approx(1.04), 1.05, True)
    requests = goals[f"{prefix}, 40 claims: API requests per volume (Lease included)"]
    assert (requests["against"], requests["value"], requests["met"]) == (None, 3.1, True)
    consumers = goals[
        f"{prefix}, 40 claims: consumer start p50 (bound to its node -> Running),"
        " CSI / hostPath at once"
    ]
    assert (consumers["against"], consumers["against_value"]) == ("hostPath consumers at once", 1.0)
    assert (consumers["value"], consumers["met"]) == (1.05, True)
    release = goals[f"{prefix}, 40 claims: release: time until PVs and dirs gone"]
    assert (release["value"], release["limit"], release["met"]) == (0.25, 0.3, True)


def test_a_csi_goal_is_missed_past_its_limit_and_not_measured_without_its_comparison() -> None:
    goals = by_goal(csi_run(single=1.2, consumer=1.2))
    assert goals["CSI, default binder limit, 1 claim: claim created to Bound"]["met"] is False
    name = "consumer start p50 (bound to its node -> Running), CSI / hostPath at once"
    assert goals[f"CSI, default binder limit, 40 claims: {name}"]["met"] is False
    # Lifted: ours-csi ran alone, one claim: its own requests are judged, nothing relative.
    lifted = {g: v["met"] for g, v in goals.items() if "lifted" in g}
    assert lifted["CSI, lifted binder limit, 1 claim: claim created to Bound"] is None
    assert lifted["CSI, lifted binder limit, 1 claim: time until all Bound"] is None
    assert (
        lifted["CSI, lifted binder limit, 1 claim: API requests per volume (Lease included)"]
        is False
    )
    assert math.isnan(
        float(str(goals["CSI, lifted binder limit, 1 claim: time until all Bound"]["value"]))
    )


def test_no_csi_goal_when_ours_csi_did_not_run() -> None:
    run = csi_run()
    for by_size in run.real.values():
        for runs in by_size.values():
            runs.pop("ours-csi", None)
    assert judge_csi_all(run.real) == []
    assert judge_csi_all({}) == []


def test_a_missed_csi_goal_shows_the_stages_and_consumer_starts_of_all_three() -> None:
    run = csi_run(consumer=1.5)
    sections = csi_time_goes(run.real, judge_csi_all(run.real))
    assert [s["scenario"] for s in sections] == [
        "CSI, real nodes, default binder limit, 40 claims",
        "CSI, real nodes, lifted binder limit, 1 claim",
    ]
    forty = sections[0]
    assert forty["columns"] == ["ours-csi", "ours", "reference-tuned"]
    consumer = next(row for row in forty["stages"] if row["stage"] == CONSUMER_START)
    assert (consumer["ours-csi"], consumer["ours"]) == ([1.5, 2], [0.5, 2])
    assert set(forty["binder_floor"]) == {"ours-csi", "ours", "reference-tuned"}


def test_the_report_gives_the_csi_goals_their_rows_and_columns() -> None:
    options = parse_options(["--scenario", "real"])
    report = build_report(options, csi_run(consumer=1.5), "python -m bench --scenario real", 1.0)
    table = csi_goals_table(report, markdown=True)
    assert "| CSI, default binder limit, 1 claim: claim created to Bound" in table
    assert "<= 0.35x ref tuned" in table
    assert "<= 1.05x its PV binder's floor" in table
    assert "<= 3.2 req" in table
    assert "MISSED" in table and "not measured" in table
    assert "ours CSI" in time_goes_tables(report)
    assert "consumer start p50" in real_table(report)
    row = next(
        r
        for r in report["real_figures"]
        if (r["binder_limit"], r["claims"], r["figure"]) == ("default", 40, "time until all Bound")
    )
    assert (row["ours-csi"], row["csi/tuned"], row["csi/ours"]) == (10.4, 10.4 / 18.0, 10.4 / 14.0)
    assert table in markdown(report)
    assert csi_goals_table(build_report(options, RunResults(), "", 1.0)) == ""


def test_a_run_waits_only_when_another_real_node_cluster_holds_the_machine() -> None:
    taken = ClusterError(
        "localcluster: another cluster with real nodes (harness pid 42) runs on this machine;"
        " only one can at a time: stop it (python -m localcluster stop) or start this one"
        " without real nodes"
    )
    assert host_taken(taken)
    assert not host_taken(ClusterError("localcluster: kube-apiserver did not become ready"))


def test_a_release_is_cut_at_the_consumer_the_claim_and_the_pv_released_and_gone() -> None:
    seen = ReleaseMoments(
        deleted=10.0, consumer_gone=12.0, claim_gone=12.5, volume_released=13.0, volume_gone=14.5
    )
    unseen = ReleaseMoments(
        deleted=10.0, consumer_gone=11.0, claim_gone=None, volume_released=None, volume_gone=16.0
    )
    stages = release_latencies([seen, unseen])
    assert list(stages) == list(RELEASE_STAGES)
    assert stages["release: deleted to consumer gone"].count == 2
    assert stages["release: deleted to consumer gone"].max == 2.0
    # A claim not seen to go counts in neither of its stages; its PV's end still has no start.
    assert stages["consumer gone to claim gone"].count == 1
    assert stages["claim gone to PV Released"].p50 == 0.5
    assert stages["PV Released to PV gone"].count == 1
    assert stages["PV Released to PV gone"].p50 == 1.5
