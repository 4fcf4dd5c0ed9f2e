"""Usage measurement: batches, the helper's answer, and the script on a real tree."""

from __future__ import annotations

import subprocess
from pathlib import Path

from provisioner.objects.records import VolumeRecord
from provisioner.scans.usage import USAGE_SCRIPT, batches, outgrown_message, parse_usage

MIB = 1024 * 1024


def volume(name: str, path: str, capacity: str = "1Mi") -> VolumeRecord:
    return VolumeRecord(name, path=path, capacity=capacity, storage_class_name="fast")


def test_batches_hold_only_volumes_inside_the_base_path() -> None:
    volumes = [volume(f"pv-{i}", f"/data/v{i}") for i in range(5)] + [volume("x", "/other/x")]
    assert [[v.name for v in b] for b in batches(volumes, "/data", size=2)] == [
        ["pv-0", "pv-1"],
        ["pv-2", "pv-3"],
        ["pv-4"],
    ]


def test_an_answer_is_taken_only_whole_and_in_order() -> None:
    batch = [volume("a", "/data/a"), volume("b", "/data/b", "bad")]
    measured = parse_usage("0 2048\n1 -\nend\n", "n1", batch)
    assert measured is not None
    assert [(m.volume_name, m.used_bytes, m.capacity_bytes, m.outgrown) for m in measured] == [
        ("a", 2 * MIB, MIB, True),
        ("b", None, None, False),
    ]
    assert "uses 2097152 bytes, more than its capacity of 1048576" in outgrown_message(measured[0])
    for bad in ("0 2048\n1 -\n", "1 2048\n0 -\nend", "0 x\n1 -\nend", "0 1\nend"):
        assert parse_usage(bad, "n1", batch) is None


def test_the_script_measures_without_following_links(tmp_path: Path) -> None:
    base = tmp_path / "base"
    (base / "ns" / "a").mkdir(parents=True)
    (base / "ns" / "a" / "data").write_bytes(b"x" * MIB)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "big").write_bytes(b"y" * (4 * MIB))
    (base / "ns" / "a" / "out").symlink_to(elsewhere)
    (base / "linked").symlink_to(elsewhere)
    result = tmp_path / "result"
    done = subprocess.run(
        ["/bin/sh", "-c", USAGE_SCRIPT, "usage"],
        check=False,
        env={
            "PATH": "/usr/bin:/bin",
            "LPS_BASE": str(base),
            "LPS_VOLUMES": "ns/a\nlinked\ngone",
            "LPS_RESULT": str(result),
        },
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    batch = [
        volume("a", f"{base}/ns/a"),
        volume("l", f"{base}/linked"),
        volume("g", f"{base}/gone"),
    ]
    measured = parse_usage(result.read_text(), "n1", batch)
    assert measured is not None
    used = {m.volume_name: m.used_bytes for m in measured}
    assert used["l"] is None and used["g"] is None
    assert used["a"] is not None and MIB <= used["a"] < 2 * MIB
