"""The failover scenario's pure parts: its phases, its claim, its goal and its table (the run
itself is the benchmark's; `test_failover_runs_end_to_end_over_a_small_data_set` runs it small)."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench.__main__ import main
from bench.failover import (
    FAILOVER_GOAL_SECONDS,
    FailoverMoments,
    failover_claim,
    failover_result,
    lease_expiry,
    median_failover,
    phases,
)
from bench.goals import judge_all
from bench.options import parse_options
from bench.report import build_report, failover_table, markdown
from bench.runner import RunResults
from bench.workspace import SCALE_CLASS
from provisioner.configuration.defaults import LEASE_DURATION_SECONDS
from provisioner.provisioning.annotations import SELECTED_NODE
from tests.bench.test_goals import failover, full_run


def test_the_goal_is_the_runtimes_default_lease_plus_two_seconds() -> None:
    # The stack passes no lease flag, so a deployment's failover waits the runtime's default.
    assert LEASE_DURATION_SECONDS == 15.0
    assert FAILOVER_GOAL_SECONDS == 17.0


def test_the_phases_follow_each_other_and_add_up_to_the_failover() -> None:
    moments = FailoverMoments(
        killed=10.0, lease_expired=24.0, leading=25.5, synced=29.0, volume_created=30.5, bound=31.0
    )
    assert phases(moments) == (15.5, 3.5, 1.5, 0.5)
    result = failover_result("reference-tuned", 50_000, moments, warm=False)
    assert result.failover_seconds == 21.0
    # The leader renewed 1 s before its kill: its lease expired 14 s later, taken 1.5 s after.
    assert (result.expiry_seconds, result.takeover_seconds) == (14.0, 1.5)
    assert result.lease_duration_seconds == LEASE_DURATION_SECONDS
    assert (result.warm, result.volumes) == (False, 50_000)
    assert math.isnan(result.standby_steady_rss_mib)


def test_a_moment_seen_before_the_one_it_follows_counts_as_the_same_instant() -> None:
    # A warm standby logs its caches synced within the poll that sees the Lease change; and
    # the PV and the Bound claim can be first seen by one poll.
    moments = FailoverMoments(
        killed=10.0, lease_expired=25.0, leading=26.0, synced=25.9, volume_created=27.0, bound=26.9
    )
    assert phases(moments) == (16.0, 0.0, 1.0, 0.0)
    assert failover_result("ours", 200, moments, warm=True).failover_seconds == 17.0


def test_a_lease_expires_its_duration_after_its_last_renewal() -> None:
    lease = {"spec": {"renewTime": "2026-11-28T06:31:10.250000Z", "leaseDurationSeconds": 15}}
    assert lease_expiry(lease) == datetime(2026, 11, 28, 6, 31, 25, 250000, UTC).timestamp()


def test_several_failovers_give_the_median_one_with_every_time_kept() -> None:
    runs = [failover("ours", 50_000, lease_wait, 0.0) for lease_wait in (16.5, 14.0, 15.5)]
    merged = median_failover(runs)
    assert merged.failover_seconds == 17.0 and merged.lease_wait_seconds == 15.5
    assert merged.failovers == [18.0, 15.5, 17.0]
    assert median_failover(runs[:2]).failover_seconds == 15.5  # the lower middle
    with pytest.raises(ValueError, match="no failovers"):
        median_failover([])


def test_the_claim_arrives_with_its_node_and_provisioner_as_the_scheduler_and_binder_leave_it() -> (
    None
):
    claim = failover_claim("failover-1", "node-2", "example.io/local-path")
    annotations = claim["metadata"]["annotations"]
    assert annotations[SELECTED_NODE] == "node-2"
    assert annotations["volume.kubernetes.io/storage-provisioner"] == "example.io/local-path"
    assert annotations["volume.beta.kubernetes.io/storage-provisioner"] == "example.io/local-path"
    assert claim["spec"]["storageClassName"] == SCALE_CLASS
    assert "volumeName" not in claim["spec"]


def test_the_failover_goal_is_ours_own_time_against_the_lease_plus_two_seconds() -> None:
    def judged(ours_lease_wait: float) -> dict[str, object]:
        results = RunResults(
            failover={
                "ours": failover("ours", 50_000, ours_lease_wait, 0.0),
                "reference-tuned": failover("reference-tuned", 50_000, 15.0, 4.0),
            }
        )
        return judge_all(results)[-1]

    met = judged(15.5)  # 15.5 + 1 + 0.5 = 17.0
    assert met["goal"] == "failover at 50000 volumes: kill to new claim Bound"
    assert (met["ours"], met["reference-tuned"], met["met"]) == (17.0, 20.5, True)
    assert met["relative"] is False
    missed = judged(16.0)
    assert (missed["value"], missed["met"]) == (17.5, False)
    only_reference = RunResults(
        failover={"reference-tuned": failover("reference-tuned", 200, 15, 1)}
    )
    assert judge_all(only_reference)[-1]["met"] is None


def test_the_report_shows_each_phase_the_lease_and_the_standbys_memory() -> None:
    results = full_run()
    results.failover["ours"].standby_steady_rss_mib = 140.0
    report = build_report(parse_options(["--no-plot"]), results, "python -m bench", 1.0)
    table = failover_table(report).splitlines()
    assert [cell.strip() for cell in table[0].split(" | ")] == [
        "failover at 50000 volumes", "ours", "reference-tuned"
    ]  # fmt: skip
    rows = {
        line.split(" | ")[0].strip(): [c.strip() for c in line.split(" | ")[1:]]
        for line in table[2:]
    }
    assert rows["takes over as"] == ["warm standby", "cold start after the lease"]
    assert rows["kill to new claim Bound (s)"] == ["17.0", "20.5"]
    assert rows["lease duration (s)"] == ["15.0", "15.0"]
    assert rows["lease wait: kill -> leading (s)"] == ["15.5", "15.0"]
    assert rows["kill -> lease expired (s)"] == ["15.0", "15.0"]
    assert rows["lease expired -> leading (s)"] == ["0.5", "0"]
    assert "kill to Bound, each failover (s)" not in rows
    assert rows["sync: leading -> caches synced (s)"] == ["0", "4"]
    assert rows["standby steady RSS (MiB)"] == ["140.0", "-"]
    assert report["failover"]["ours"]["failover_seconds"] == 17.0
    assert "| failover at 50000 volumes" in markdown(report)
    assert failover_table(build_report(parse_options([]), RunResults(), "", 1.0)) == ""
    results.failover["ours"].failovers = [17.0, 18.5, 16.0]
    report = build_report(parse_options(["--no-plot"]), results, "python -m bench", 1.0)
    each = next(line for line in markdown(report).splitlines() if "each failover" in line)
    assert [cell.strip() for cell in each.split("|")][2] == "17.0, 18.5, 16.0"


def test_failover_is_a_scenario_of_its_own_and_runs_by_default() -> None:
    assert "failover" in parse_options([]).scenarios
    assert parse_options(["--scenario", "failover"]).scenarios == {"failover"}


@pytest.mark.cluster
@pytest.mark.slow
def test_failover_runs_end_to_end_over_a_small_data_set(tmp_path: Path) -> None:
    """Ours' leader killed beside a warm standby and the tuned reference started cold, over
    200 volumes: each new claim is Bound, after at least the hand-over. About 2.5 minutes."""
    output = tmp_path / "failover.json"
    argv = [
        "--only", "ours", "--only", "reference-tuned", "--scenario", "failover",
        "--scale-volumes", "200", "--scale-starts", "1", "--idle-seconds", "2", "--timeout", "120",
        "--no-plot", "--output", str(output),
    ]  # fmt: skip
    assert main(argv) == 0
    report = json.loads(output.read_text())
    ours, reference = report["failover"]["ours"], report["failover"]["reference-tuned"]
    assert (ours["warm"], reference["warm"]) == (True, False)
    assert ours["volumes"] == reference["volumes"] == 200
    # The Lease must expire before anyone else leads; a warm standby needs no sync after it.
    assert ours["lease_wait_seconds"] >= LEASE_DURATION_SECONDS - 2
    assert reference["lease_wait_seconds"] >= LEASE_DURATION_SECONDS
    assert ours["sync_seconds"] < 1.0
    assert ours["standby_steady_rss_mib"] > 0
    assert ours["expiry_seconds"] <= LEASE_DURATION_SECONDS <= reference["expiry_seconds"] + 0.1
    assert report["goals"][-1]["goal"] == "failover at 200 volumes: kill to new claim Bound"
