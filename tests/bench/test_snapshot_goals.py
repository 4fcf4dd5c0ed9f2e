"""The snapshot scenario's goals and report lines (bench/snapshot_goals.py), on made-up runs."""

from __future__ import annotations

import math
from dataclasses import asdict, replace

import pytest

from bench.options import DEFAULT_SCENARIOS, parse_options
from bench.report import snapshot_lines
from bench.snapshot_goals import DiskRun, judge_disk, report_lines, stages

PLAIN = DiskRun(
    disk="plain",
    filesystem="ext2/ext3",
    snapshot_kind="copy",
    data_bytes=1008 << 20,
    snapshot_ready=2.0,
    snapshot_admitted=0.1,
    content_ready=1.95,
    node_take=1.8,
    snapshot_sync=1.0,
    restore_pv=0.05,
    restore_bound=0.1,
    restore_done=2.05,
    node_restore=2.0,
    restore_sync=1.0,
    cp=2.0,
    cp_sync=1.0,
    reflink=math.nan,
    reflink_sync=math.nan,
)
BTRFS = replace(
    PLAIN,
    disk="btrfs",
    filesystem="btrfs",
    snapshot_kind="btrfs",
    snapshot_ready=0.3,
    node_take=0.01,
    snapshot_sync=0.01,
    restore_done=0.4,
    node_restore=0.35,
    restore_sync=0.02,
    cp=3.0,
    reflink=0.2,
    reflink_sync=0.01,
)


def by_name(rows: list[dict[str, object]], what: str) -> dict[str, object]:
    (row,) = [row for row in rows if what in str(row["goal"])]
    return row


def test_a_plain_disk_is_held_to_cp_a_with_sync_over_0_8() -> None:
    rows = judge_disk(PLAIN)
    snapshot = by_name(rows, "snapshot ready")
    # Ours 2.0 + 1.0 sync against (2.0 + 1.0) / 0.8 = 3.75: met, at the floor's throughput.
    assert snapshot["value"] == pytest.approx(3.0)
    assert snapshot["limit"] == pytest.approx(3.75)
    assert snapshot["met"] is True
    assert snapshot["throughput_share"] == pytest.approx(1.0)
    slow = by_name(judge_disk(replace(PLAIN, snapshot_ready=2.8)), "snapshot ready")
    assert slow["value"] == pytest.approx(3.8)
    assert slow["met"] is False
    assert slow["throughput_share"] == pytest.approx(3.0 / 3.8)


def test_a_restore_is_ready_when_bound_and_copied_whichever_is_last() -> None:
    restore = by_name(judge_disk(PLAIN), "restore ready")
    assert restore["value"] == pytest.approx(2.05 + 1.0)
    late_bound = replace(PLAIN, restore_bound=2.5)
    assert late_bound.restore_ready == 2.5
    assert by_name(judge_disk(late_bound), "restore ready")["value"] == pytest.approx(3.5)


def test_btrfs_is_held_to_half_a_second_of_its_own() -> None:
    rows = judge_disk(BTRFS)
    assert [row["met"] for row in rows] == [True, True]
    assert {row["limit"] for row in rows} == {0.5}
    late = judge_disk(replace(BTRFS, snapshot_ready=0.6))
    assert by_name(late, "snapshot ready")["met"] is False


def test_a_missing_figure_is_not_measured_rather_than_met() -> None:
    rows = judge_disk(replace(PLAIN, cp=math.nan))
    assert [row["met"] for row in rows] == [None, None]


def test_the_report_says_each_stage_and_where_a_missed_goal_went() -> None:
    slow = replace(PLAIN, snapshot_ready=2.8, node_take=2.6)
    lines = report_lines([slow, BTRFS], judge_disk(slow) + judge_disk(BTRFS))
    text = "\n".join(lines)
    assert "plain disk (ext2/ext3, snapshot by copy), 0.98 GiB of data:" in lines
    assert "    of it the node's take (record -> taken): 2.600 s" in lines
    assert "  floor: cp -a: 2.000 s" in lines
    # No reflink on the plain disk: no reflink line there; btrfs has one.
    assert text.count("floor: cp -a --reflink=always") == 1
    assert (
        "goal plain disk (ext2/ext3): snapshot ready: 3.800 s, limit 3.750 s"
        " (cp -a + sync, / 0.8): MISSED; 0.79x the floor's throughput"
    ) in lines
    assert (
        "  where the time goes: created -> admitted 0.100 s, the node's take 2.600 s,"
        " content and status round trips 0.100 s, of it after the content was ready 0.850 s,"
        " sync 1.000 s"
    ) in lines
    assert "goal btrfs disk (btrfs): snapshot ready: 0.300 s, limit 0.500 s" in text


def test_stages_split_the_snapshot_into_the_node_s_take_and_the_rest() -> None:
    named = dict(stages(PLAIN))
    assert named["  created -> admitted by the controller"] == pytest.approx(0.1)
    assert named["  the rest (content, status round trips)"] == pytest.approx(0.1)
    assert "floor: cp -a --reflink=always" not in named
    assert dict(stages(BTRFS))["floor: cp -a --reflink=always"] == 0.2


def test_the_report_reads_the_runs_back_from_json_with_nan_as_null() -> None:
    as_json = {**asdict(PLAIN), "reflink": None, "reflink_sync": None}
    back = DiskRun.from_dict(as_json)
    assert math.isnan(back.reflink) and math.isnan(back.reflink_sync)
    assert replace(back, reflink=0.0, reflink_sync=0.0) == replace(
        PLAIN, reflink=0.0, reflink_sync=0.0
    )
    report = {"snapshots": [as_json], "snapshot_goals": judge_disk(PLAIN)}
    lines = snapshot_lines(report)
    assert lines[0].startswith("plain disk (ext2/ext3, snapshot by copy)")


def test_the_scenario_runs_only_when_asked() -> None:
    assert "snapshots" not in DEFAULT_SCENARIOS
    assert parse_options(["--scenario", "snapshots"]).scenarios == {"snapshots"}
