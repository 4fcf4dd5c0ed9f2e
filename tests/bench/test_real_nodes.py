"""The real-node scenario's pure parts: its flags, the consumers' spread, the helper pods' start
times against the model, its goals and its tables (the run itself is the benchmark's;
`test_real_node_bursts_run_end_to_end` runs it small)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from bench.__main__ import main
from bench.burst import STAGES, BurstResult, consumer, helper_pod_containers, spread
from bench.goals import judge_all, where_time_goes
from bench.hostpath_control import hostpath_consumer
from bench.implementations import ALL, OURS_CAPACITY
from bench.options import parse_options
from bench.real_nodes import REAL_SIZES, limit_qps, pod_start_rows, real_implementations
from bench.report import build_report, markdown, pod_starts_table, print_report, real_table
from bench.runner import RunResults
from localcluster.pod_start import KUBELET, PodStartModel
from tests.bench.test_goals import burst, by_name


def real_burst(
    key: str,
    claims: int,
    bind: float,
    p99: float,
    requests: float,
    *,
    pods: tuple[tuple[int, float], ...] = (),
) -> BurstResult:
    result = burst(key, bind, p99, requests)
    result.claims = claims
    result.helper_pods = list(pods)
    return result


def real_run(ours_20: float = 10.0) -> RunResults:
    """Default limit: ours beats the tuned reference everywhere except the 20-claim burst
    (`ours_20` against its 20 s) and requests per volume at 40 (4.0); the lifted limit holds
    one claim only."""
    default = {
        1: {
            "ours": real_burst("ours", 1, 2.5, 2.5, 6.0, pods=((1, 2.5),)),
            "reference-tuned": real_burst("reference-tuned", 1, 3.0, 3.0, 9.0, pods=((1, 2.4),)),
        },
        20: {
            "ours": real_burst("ours", 20, ours_20, 9.0, 3.8),
            "reference-tuned": real_burst("reference-tuned", 20, 20.0, 19.0, 9.0),
            "reference-default": real_burst("reference-default", 20, 40.0, 39.0, 9.0),
        },
        40: {
            "ours": real_burst("ours", 40, 20.0, 18.0, 4.0, pods=((3, 5.0), (3, 6.0))),
            "reference-tuned": real_burst("reference-tuned", 40, 30.0, 29.0, 9.0),
        },
    }
    lifted = {1: {"ours": real_burst("ours", 1, 2.0, 2.0, 6.0, pods=((1, 2.0),))}}
    return RunResults(real={"default": default, "lifted": lifted})


def test_real_is_a_scenario_asked_for_by_name_only() -> None:
    assert "real" not in parse_options([]).scenarios
    options = parse_options(["--scenario", "real"])
    assert options.scenarios == {"real"}
    assert options.real_sizes == REAL_SIZES == (1, 20, 40)
    assert parse_options(["--scenario", "real", "--real-sizes", "1,5"]).real_sizes == (1, 5)


@pytest.mark.parametrize("sizes", ["", "1,0", "one"])
def test_real_sizes_must_be_positive_numbers(sizes: str) -> None:
    with pytest.raises(SystemExit):
        parse_options(["--real-sizes", sizes])


def test_real_nodes_run_ours_with_csi_and_both_references_never_capacity_on() -> None:
    chosen = real_implementations(ALL)
    assert [i.key for i in chosen] == ["ours", "ours-csi", "reference-default", "reference-tuned"]
    assert OURS_CAPACITY not in chosen


def test_the_binder_limit_is_the_default_or_the_lifted_qps() -> None:
    assert limit_qps("default", None, 200) is None
    assert limit_qps("default", 50, 200) == 50
    assert limit_qps("lifted", None, 200) == 200
    with pytest.raises(ValueError, match="unknown binder limit"):
        limit_qps("raised", None, 200)


def test_consumers_go_to_the_nodes_in_turn_by_a_node_selector() -> None:
    nodes = ["real-1", "real-2"]
    assert [spread(i, nodes) for i in range(5)] == ["real-1", "real-2"] * 2 + ["real-1"]
    assert spread(3, []) is None
    pod = consumer("app-1", "claim-1", "registry.k8s.io/pause:3.10", "real-2")
    assert pod["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "real-2"}
    assert pod["spec"]["containers"][0]["image"] == "registry.k8s.io/pause:3.10"
    claim = pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"]
    assert claim == "claim-1"
    assert "nodeSelector" not in consumer("app-1", "claim-1", "x")["spec"]


def test_the_hostpath_control_differs_from_a_consumer_only_in_its_volume() -> None:
    control = hostpath_consumer("hostpath-00001", Path("/run/control"), "pause:1", "real-2")
    claimed = consumer("hostpath-00001", "claim-1", "pause:1", "real-2")
    assert control["spec"]["volumes"] == [
        {
            "name": "data",
            "hostPath": {"path": "/run/control/hostpath-00001", "type": "DirectoryOrCreate"},
        }
    ]
    del control["spec"]["volumes"], claimed["spec"]["volumes"]
    assert control == claimed


def test_a_helper_pod_runs_its_init_containers_and_containers_in_sequence() -> None:
    pod: dict[str, Any] = {"spec": {"initContainers": [{}, {}, {}], "containers": [{}]}}
    assert helper_pod_containers(pod) == 4
    assert helper_pod_containers({"spec": {"containers": [{}]}}) == 1
    assert helper_pod_containers({}) == 0


def test_pod_starts_are_grouped_by_burst_size_and_containers_beside_the_model() -> None:
    rows = pod_start_rows(real_run().real, KUBELET)
    assert [(r["claims"], r["containers"], r["pods"]) for r in rows] == [(1, 1, 3), (40, 3, 2)]
    single, shared = rows
    assert single["model"] == pytest.approx(2.2)  # 1.2 s of sandbox and 1.0 s a container
    assert (single["p50"], single["p90"], single["max"]) == (2.4, 2.5, 2.5)
    assert single["p50/model"] == pytest.approx(2.4 / 2.2)
    assert shared["model"] == pytest.approx(4.2)
    assert (shared["p50"], shared["max"]) == (5.0, 6.0)
    assert math.isnan(pod_start_rows(real_run().real, PodStartModel())[0]["p50/model"])


def test_the_real_node_goals_read_their_own_sizes_under_each_limit() -> None:
    goals = by_name(judge_all(real_run()))
    prefix = "real nodes, default binder limit"
    single = goals[f"{prefix}, 1 claim: claim created to Bound"]
    assert (single["ours"], single["reference-tuned"], single["met"]) == (2.5, 3.0, True)
    twenty = goals[f"{prefix}, 20 claims: time until all Bound"]
    assert (twenty["value"], twenty["limit"], twenty["met"]) == (0.5, 0.8, True)
    requests = goals[f"{prefix}, 40 claims: API requests per volume"]
    assert (requests["value"], requests["limit"], requests["met"]) == (4.0, 3.5, False)
    p99 = goals[f"{prefix}, 40 claims: claim latency p99"]
    assert (p99["value"], p99["met"]) == (18.0 / 29.0, True)
    # Under the lifted limit ours alone ran one claim: the relative goals are not measured,
    # requests per volume is ours' own figure at the largest size run there.
    lifted = {g["goal"]: g["met"] for g in goals.values() if g["scenario"] == "real-lifted"}
    assert lifted == {
        "real nodes, lifted binder limit, 1 claim: claim created to Bound": None,
        "real nodes, lifted binder limit, 20 claims: time until all Bound": None,
        "real nodes, lifted binder limit, 1 claim: API requests per volume": False,
        "real nodes, lifted binder limit, 1 claim: claim latency p99": None,
    }


def test_the_real_node_goals_are_missed_beyond_their_limits() -> None:
    goals = by_name(judge_all(real_run(ours_20=16.5)))
    twenty = goals["real nodes, default binder limit, 20 claims: time until all Bound"]
    assert (twenty["value"], twenty["met"]) == (16.5 / 20.0, False)


def test_no_real_node_goal_without_the_real_scenario() -> None:
    assert not [g for g in judge_all(RunResults()) if g["scenario"].startswith("real")]


def test_a_missed_real_node_goal_shows_the_stages_of_its_size() -> None:
    results = real_run(ours_20=16.5)
    sections = where_time_goes(results, judge_all(results))
    real = {s["scenario"]: s for s in sections if s["scenario"].startswith("real")}
    assert list(real) == [
        "real nodes, default binder limit, 20 claims",
        "real nodes, default binder limit, 40 claims",
        "real nodes, lifted binder limit, 1 claim",
    ]
    twenty = real["real nodes, default binder limit, 20 claims"]
    assert twenty["missed"] == ["real nodes, default binder limit, 20 claims: time until all Bound"]
    assert [row["stage"] for row in twenty["stages"]] == list(STAGES)
    assert twenty["stages"][0]["reference-default"] == [1.0, 2.0]
    assert set(twenty["binder_floor"]) == {"ours", "reference-tuned", "reference-default"}


def test_the_report_gives_each_limit_and_size_and_the_pod_starts() -> None:
    options = parse_options(["--scenario", "real"])
    report = build_report(options, real_run(), "python -m bench --scenario real", 1.0)
    assert report["figures"] == []  # no kwok burst, no scale: no empty rows
    assert report["options"]["real_sizes"] == [1, 20, 40]
    rows = report["real_figures"]
    assert {(r["binder_limit"], r["claims"]) for r in rows} == {
        ("default", 1), ("default", 20), ("default", 40), ("lifted", 1),
    }  # fmt: skip
    bind = next(r for r in rows if r["claims"] == 20 and r["figure"] == "time until all Bound")
    assert (bind["ours"], bind["reference-tuned"], bind["reference-default"]) == (10, 20, 40)
    assert (bind["ours/tuned"], bind["ours/default"]) == (0.5, 0.25)
    assert report["real"]["default"]["40"]["ours"]["helper_pods"] == [(3, 5.0), (3, 6.0)]
    assert [r["containers"] for r in report["real_pod_starts"]] == [1, 3]
    table = real_table(report, markdown=True)
    assert "| default      | 20     | time until all Bound" in table
    assert "| 40              | 3          | 2" in pod_starts_table(report, markdown=True)
    assert "time until all Bound" in markdown(report)
    assert real_table(build_report(options, RunResults(), "", 1.0)) == ""


def test_a_real_node_run_prints_its_sizes_and_tables_not_the_kwok_burst(
    capsys: pytest.CaptureFixture[str],
) -> None:
    options = parse_options(["--scenario", "real"])
    print_report(build_report(options, real_run(), "python -m bench --scenario real", 1.0))
    printed = capsys.readouterr().out
    assert "bursts of 1, 20, 40 claims on 2 real nodes" in printed
    assert "claims over 4 nodes" not in printed
    assert "bursts on real nodes" in printed
    assert "helper pods on real nodes, created -> Succeeded" in printed


@pytest.mark.cluster
@pytest.mark.realnode
@pytest.mark.slow
def test_real_node_bursts_run_end_to_end(tmp_path: Path) -> None:
    """Ours' single-claim burst on two real nodes under each binder limit: Bound, released, its
    helper pod run by a real kubelet. About a minute; needs root and no other real-node cluster."""
    output = tmp_path / "real.json"
    argv = [
        "--only", "ours", "--scenario", "real", "--real-sizes", "1", "--timeout", "120",
        "--no-plot", "--output", str(output),
    ]  # fmt: skip
    assert main(argv) == 0
    report = json.loads(output.read_text())
    for limit in ("default", "lifted"):
        ours = report["real"][limit]["1"]["ours"]
        assert ours["claims"] == 1 and 0 < ours["bind_seconds"] < 60
        assert ours["release_seconds"] > 0 and ours["requests_per_volume"] > 0
        # The kubelet ran the create and the delete helper pods, each ending Succeeded.
        assert len(ours["helper_pods"]) >= 2
        assert all(seconds > 0.5 for _, seconds in ours["helper_pods"])
    assert report["real_pod_starts"][0]["claims"] == 1


@pytest.mark.cluster
@pytest.mark.realnode
@pytest.mark.slow
def test_csi_volume_bursts_run_end_to_end(tmp_path: Path) -> None:
    """Ours with CSI volumes, one claim on two real nodes under each binder limit: the node
    plugins the bench started register, the claim is Bound with no helper pod, its consumer runs
    with the volume the kubelet published, and the release removes the directory and the PV.
    About a minute; needs root and no other real-node cluster."""
    output = tmp_path / "real.json"
    argv = [
        "--only", "ours-csi", "--scenario", "real", "--real-sizes", "1", "--timeout", "120",
        "--no-plot", "--output", str(output),
    ]  # fmt: skip
    assert main(argv) == 0
    report = json.loads(output.read_text())
    for limit in ("default", "lifted"):
        csi = report["real"][limit]["1"]["ours-csi"]
        assert csi["claims"] == 1 and 0 < csi["bind_seconds"] < 60
        assert csi["helper_pods"] == []
        assert csi["consumer_start"]["count"] == 1 and csi["consumer_start"]["p50"] > 0
        control = csi["hostpath_consumer_start"]
        assert control["count"] == 1 and control["p50"] > 0
        assert csi["release_seconds"] > 0 and csi["requests_per_volume"] > 0
    goals = {goal["goal"]: goal for goal in report["csi_goals"]}
    requests = goals["CSI, default binder limit, 1 claim: API requests per volume (Lease included)"]
    assert requests["ours-csi"] > 0
