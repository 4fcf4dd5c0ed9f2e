"""Issue 39's snapshot goals (item 6), judged on one `snapshots` run, and the lines that say
where the time goes: pure, so the maths and the report's words are tested without a cluster.

Each disk (the node's plain ext4 directory, its btrfs disk) gives one `DiskRun`: ours (a
VolumeSnapshot until readyToUse, a restore claim until Bound and its copy done on the node) and
the floors (`cp -a`, and `cp -a --reflink=always` where the filesystem has reflinks) of the same
data on the same disk, each followed by its own timed `sync -f` of that filesystem.

Why sync is counted for both, the same way: neither our copy nor the floor's `cp` syncs, so each
leaves dirty pages behind whose writing the next one would otherwise pay. A `sync -f` right
after each (ours once readyToUse or once the node's restore is done; the floor's once its `cp`
ended) writes its own data out, and the goals hold ours' time plus its sync against the floor's
time plus its sync. A btrfs snapshot or reflink writes metadata only, so its sync is short; the
figures without sync are reported too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

GIB = 1 << 30
BTRFS_READY_LIMIT_SECONDS = 0.5
"""A btrfs snapshot (and a restore there) ready in at most this, whatever the volume's size."""
PLAIN_THROUGHPUT_SHARE = 0.8
"""A plain-disk snapshot (and restore) at least this share of `cp -a`'s throughput: its time at
most `cp -a`'s / 0.8."""


@dataclass(frozen=True)
class DiskRun:
    """One disk's measurements, in seconds (NaN: not measured)."""

    disk: str
    """"plain" or "btrfs"."""
    filesystem: str
    """What the node's base path is on (ext4, btrfs)."""
    snapshot_kind: str
    """What the node made: btrfs, reflink or copy (its record's kind)."""
    data_bytes: int
    """What the writer pod wrote into the volume."""
    snapshot_ready: float
    """VolumeSnapshot created -> its status readyToUse, seen by the bench."""
    snapshot_admitted: float
    """VolumeSnapshot created -> the controller's log says it admitted the content."""
    content_ready: float
    """VolumeSnapshot created -> its content's status readyToUse seen (the node's word on it);
    NaN when not seen before the snapshot's own."""
    node_take: float
    """The node's own take: its record's creation -> its "taken" log line."""
    snapshot_sync: float
    restore_pv: float
    """Restore claim created -> its PV seen."""
    restore_bound: float
    """Restore claim created -> Bound."""
    restore_done: float
    """Restore claim created -> the node's log says the volume is made, restored."""
    node_restore: float
    """The node's own restore: its PV seen -> the node's "restored" log line."""
    restore_sync: float
    cp: float
    cp_sync: float
    reflink: float
    """`cp -a --reflink=always` (NaN where the filesystem has no reflinks)."""
    reflink_sync: float

    @staticmethod
    def from_dict(fields: dict[str, Any]) -> DiskRun:
        """A run as the report holds it (its JSON has null for NaN)."""
        texts = ("disk", "filesystem", "snapshot_kind")
        return DiskRun(
            disk=str(fields["disk"]),
            filesystem=str(fields["filesystem"]),
            snapshot_kind=str(fields["snapshot_kind"]),
            data_bytes=int(fields["data_bytes"]),
            **{
                key: math.nan if value is None else float(value)
                for key, value in fields.items()
                if key not in (*texts, "data_bytes")
            },
        )

    @property
    def restore_ready(self) -> float:
        """The restored volume usable: Bound, and its data in place on the node."""
        return max(self.restore_bound, self.restore_done)


def _with_sync(seconds: float, sync: float) -> float:
    return seconds + sync


def judge_disk(run: DiskRun) -> list[dict[str, Any]]:
    """The disk's two goals (snapshot, restore): ours' figure, the limit, met (None: a figure
    missing). btrfs: ready within 0.5 s; plain: ours + sync within (cp -a + sync) / 0.8."""
    rows = []
    for what, ours, ours_sync in (
        ("snapshot ready", run.snapshot_ready, run.snapshot_sync),
        ("restore ready", run.restore_ready, run.restore_sync),
    ):
        if run.disk == "btrfs":
            value, limit, against = ours, BTRFS_READY_LIMIT_SECONDS, "none (own time)"
            floor = run.reflink
        else:
            value = _with_sync(ours, ours_sync)
            floor = _with_sync(run.cp, run.cp_sync)
            limit, against = floor / PLAIN_THROUGHPUT_SHARE, "cp -a + sync, / 0.8"
        met = None if math.isnan(value) or math.isnan(limit) else value <= limit
        rows.append(
            {
                "goal": f"{run.disk} disk ({run.filesystem}): {what}",
                "disk": run.disk,
                "value": value,
                "limit": limit,
                "against": against,
                "floor": floor,
                "throughput_share": _share(run.data_bytes, value, floor),
                "met": met,
            }
        )
    return rows


def _share(data_bytes: int, ours: float, floor: float) -> float:
    """Ours' throughput as a share of the floor's (floor time / ours' time)."""
    if data_bytes <= 0 or not ours or math.isnan(ours) or math.isnan(floor):
        return math.nan
    return floor / ours


def judge_snapshots(runs: list[DiskRun]) -> list[dict[str, Any]]:
    return [row for run in runs for row in judge_disk(run)]


def stages(run: DiskRun) -> list[tuple[str, float]]:
    """Where each figure's time goes, in order: ours' stages, then the floors."""
    rows = [
        ("snapshot: VolumeSnapshot created -> readyToUse", run.snapshot_ready),
        ("  created -> admitted by the controller", run.snapshot_admitted),
        ("  of it the node's take (record -> taken)", run.node_take),
        ("  the rest (content, status round trips)", _rest(run)),
        ("  created -> the content readyToUse", run.content_ready),
        ("  the content readyToUse -> the snapshot's", run.snapshot_ready - run.content_ready),
        ("  sync -f after it", run.snapshot_sync),
        ("restore: claim created -> ready (Bound, copy done)", run.restore_ready),
        ("  claim created -> PV seen", run.restore_pv),
        ("  the node's copy (PV seen -> restored)", run.node_restore),
        ("  claim created -> Bound", run.restore_bound),
        ("  sync -f after it", run.restore_sync),
        ("floor: cp -a", run.cp),
        ("  sync -f after it", run.cp_sync),
    ]
    if not math.isnan(run.reflink):
        rows += [
            ("floor: cp -a --reflink=always", run.reflink),
            ("  sync -f after it", run.reflink_sync),
        ]
    return rows


def _rest(run: DiskRun) -> float:
    """A snapshot's time neither to its admission nor the node's take."""
    return run.snapshot_ready - run.snapshot_admitted - run.node_take


def _seconds(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.3f}"


def report_lines(runs: list[DiskRun], goals: list[dict[str, Any]]) -> list[str]:
    """The scenario's printed report: per disk its stages, then each goal, met or MISSED, and
    for a missed one the stage that took most of its time."""
    lines = []
    for run in runs:
        size = run.data_bytes / GIB
        lines.append(
            f"{run.disk} disk ({run.filesystem}, snapshot by {run.snapshot_kind}),"
            f" {size:.2f} GiB of data:"
        )
        lines += [f"  {name}: {_seconds(value)} s" for name, value in stages(run)]
    for goal in goals:
        result = {True: "met", False: "MISSED", None: "not measured"}[goal["met"]]
        share = goal["throughput_share"]
        lines.append(
            f"goal {goal['goal']}: {_seconds(goal['value'])} s, limit {_seconds(goal['limit'])} s"
            f" ({goal['against']}): {result}"
            + ("" if math.isnan(share) else f"; {share:.2f}x the floor's throughput")
        )
        if goal["met"] is False:
            lines.append(f"  where the time goes: {where_time_goes(runs, goal)}")
    return lines


def where_time_goes(runs: list[DiskRun], goal: dict[str, Any]) -> str:
    """The largest stage of a missed goal's figure."""
    run = next(run for run in runs if run.disk == goal["disk"])
    if "snapshot" in goal["goal"]:
        parts = [
            ("created -> admitted", run.snapshot_admitted),
            ("the node's take", run.node_take),
            ("content and status round trips", _rest(run)),
            ("of it after the content was ready", run.snapshot_ready - run.content_ready),
            ("sync", run.snapshot_sync if run.disk != "btrfs" else math.nan),
        ]
    else:
        parts = [
            ("claim -> PV", run.restore_pv),
            ("the node's copy", run.node_restore),
            ("sync", run.restore_sync if run.disk != "btrfs" else math.nan),
        ]
    known = [(name, value) for name, value in parts if not math.isnan(value)]
    return ", ".join(f"{name} {value:.3f} s" for name, value in known) or "no stage measured"
