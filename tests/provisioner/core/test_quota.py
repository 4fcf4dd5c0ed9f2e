"""Project quotas: detection on the real filesystem, and the commands against a recorded
`xfs_quota` stand-in (no kernel here has quota support) that answers as xfs_quota(8) does."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from provisioner.core.quota import QUOTA_SCRIPT, project_id_for

STATE_ON = """\
Project quota state on {mount} (/dev/loop7)
  Accounting: ON
  Enforcement: {enforcement}
  Inode: #131 (1 blocks, 1 extents)
Blocks grace time: [7 days]
Blocks max warnings: 5
Inodes grace time: [7 days]
Inodes max warnings: 5
Realtime Blocks grace time: [7 days]
"""


def mountinfo_line(mount: str, fstype: str, options: str) -> str:
    return f"36 25 7:7 / {mount} rw,relatime shared:1 - {fstype} /dev/loop7 {options}\n"


def stand_in(tools: Path, *, enforcement: str = "ON", limit_error: str = "") -> Path:
    """An xfs_quota that appends its argv (JSON) to tools/argv and answers like the real one."""
    tools.mkdir(exist_ok=True)
    record = tools / "argv"
    script = tools / "xfs_quota"
    script.write_text(
        "#!/usr/bin/env python3\n"
        "import json, sys\n"
        f"open({str(record)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
        "commands = [sys.argv[i + 1] for i, a in enumerate(sys.argv) if a == '-c']\n"
        "for command in commands:\n"
        "    if command == 'state -p':\n"
        f"        print({STATE_ON!r}.format(mount=sys.argv[-1], enforcement={enforcement!r}))\n"
        "    elif command.startswith('project -s'):\n"
        "        words = command.split()\n"
        "        print(f'Setting up project {words[-1]} (path {words[-2]})...')\n"
        "        print(f'Processed 1 (/etc/projects and cmdline) paths for project {words[-1]}"
        " with recursion depth infinite (-1).')\n"
        f"    elif command.startswith('limit') and {limit_error!r}:\n"
        f"        print('xfs_quota: cannot set limits: ' + {limit_error!r}, file=sys.stderr)\n"
        "        sys.exit(1)\n"
    )
    script.chmod(0o755)
    return record


def run_quota(
    volume: Path, *, tools: Path | None = None, mountinfo: Path | None = None, mode: str = "set"
) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": f"{tools}:/usr/bin:/bin" if tools else "/usr/bin:/bin",
        "VOL_DIR": str(volume),
        "LPS_SIZE": "1073741824",
        "LPS_PROJECT_ID": "1234567",
        "LPS_QUOTA_MODE": mode,
    }
    if mountinfo is not None:
        env["LPS_MOUNTINFO"] = str(mountinfo)
    return subprocess.run(
        ["/bin/sh", "-c", QUOTA_SCRIPT, "quota"],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )


def recorded(record: Path) -> list[list[str]]:
    if not record.exists():
        return []
    return [json.loads(line) for line in record.read_text().splitlines()]


def test_detection_on_this_machines_real_filesystem_finds_no_project_quota(
    tmp_path: Path,
) -> None:
    record = stand_in(tmp_path / "tools")
    done = run_quota(tmp_path, tools=tmp_path / "tools")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("no-quota "), done.stdout
    assert "without prjquota" in done.stdout or "has no project quotas" in done.stdout
    assert recorded(record) == [], "xfs_quota was asked although the mount options say no"


@pytest.mark.parametrize(("fstype", "foreign"), [("xfs", []), ("ext4", ["-f"])])
def test_setup_marks_the_tree_and_sets_a_hard_limit_where_enforced(
    tmp_path: Path, fstype: str, foreign: list[str]
) -> None:
    volume = tmp_path / "data" / "pvc-1"
    volume.mkdir(parents=True)
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        mountinfo_line("/", "ext4", "rw")
        + mountinfo_line(str(tmp_path / "data"), fstype, "rw,attr2,inode64,prjquota")
        + mountinfo_line(str(tmp_path / "other"), "xfs", "rw")
    )
    record = stand_in(tmp_path / "tools")
    done = run_quota(volume, tools=tmp_path / "tools", mountinfo=mountinfo)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "quota 1234567 1073741824"
    assert recorded(record) == [
        ["-x", *foreign, "-c", "state -p", str(volume)],
        [
            "-x",
            *foreign,
            "-c",
            f"project -s -p {volume} 1234567",
            "-c",
            "limit -p bhard=1073741824 1234567",
            str(volume),
        ],
    ]


def test_resize_sets_only_the_new_limit(tmp_path: Path) -> None:
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(mountinfo_line("/", "xfs", "rw,pquota"))
    record = stand_in(tmp_path / "tools")
    done = run_quota(tmp_path, tools=tmp_path / "tools", mountinfo=mountinfo, mode="resize")
    assert done.returncode == 0, done.stderr
    assert recorded(record)[-1] == ["-x", "-c", "limit -p bhard=1073741824 1234567", str(tmp_path)]


def test_accounting_without_enforcement_is_no_quota(tmp_path: Path) -> None:
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(mountinfo_line("/", "xfs", "rw,prjquota"))
    record = stand_in(tmp_path / "tools", enforcement="OFF")
    done = run_quota(tmp_path, tools=tmp_path / "tools", mountinfo=mountinfo)
    assert done.stdout.startswith("no-quota project quota enforcement is off")
    assert len(recorded(record)) == 1


def test_an_enforced_quota_that_cannot_be_set_fails_with_the_reason(tmp_path: Path) -> None:
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(mountinfo_line("/", "xfs", "rw,prjquota"))
    stand_in(tmp_path / "tools", limit_error="Operation not permitted")
    done = run_quota(tmp_path, tools=tmp_path / "tools", mountinfo=mountinfo)
    assert done.returncode == 1
    assert "Operation not permitted" in done.stderr and "CAP_SYS_ADMIN" in done.stderr


def test_no_xfs_quota_in_the_image_is_no_quota(tmp_path: Path) -> None:
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(mountinfo_line("/", "xfs", "rw,prjquota"))
    done = run_quota(tmp_path, mountinfo=mountinfo)
    assert done.stdout.strip() == "no-quota the helper image has no xfs_quota"


def test_project_ids_are_stable_and_above_the_admins_range() -> None:
    assert project_id_for("pvc-a") == project_id_for("pvc-a") != project_id_for("pvc-b")
    assert 1 << 20 <= project_id_for("pvc-a") < 1 << 31
