"""Project quotas: detection on the real filesystem, and the commands against a recorded
`xfs_quota` stand-in (no kernel here has quota support) that answers as xfs_quota(8) does."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from provisioner.capacity.quota import PROJECT_ID_PROBES, QUOTA_SCRIPT, project_id_for

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


STAND_IN = """\
#!/usr/bin/env python3
import fcntl, json, os, sys, time

tools = os.path.dirname(os.path.abspath(__file__))
enforcement, limit_error = json.load(open(os.path.join(tools, "settings")))
with open(os.path.join(tools, "argv"), "a") as record:
    record.write(json.dumps(sys.argv[1:]) + "\\n")
commands = [sys.argv[i + 1] for i, a in enumerate(sys.argv) if a == "-c"]
# The filesystem's project quota state (a kernel's: each call atomic): the project ID each
# directory carries and each project's hard limit.
path = os.path.join(tools, "state")
with open(os.path.join(tools, "state.lock"), "a") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    state = json.load(open(path)) if os.path.exists(path) else {"carried": {}, "limits": {}}
for command in commands:
    words = command.split()
    if command == "state -p":
        print(STATE_ON.format(mount=sys.argv[-1], enforcement=enforcement))
    elif command.startswith("report"):
        print("#0 0 0 0 00 [--------]")
        for project, limit in sorted(state["limits"].items()):
            print(f"#{project} 0 0 {limit // 1024} 00 [--------]")
        # The window between listing the IDs in use and taking one, as a busy node has it.
        time.sleep(float(os.environ.get("STAND_IN_REPORT_SECONDS", "0")))
    elif command.startswith("project -c"):
        carried = state["carried"].get(words[-2], "0")
        print(f"Checking project {words[-1]} (path {words[-2]})...")
        if carried != words[-1]:
            print(f"{words[-2]} - project identifier is not set"
                  f" (inode={carried}, tree={words[-1]})")
        print(f"Processed 1 (/etc/projects and cmdline) paths for project {words[-1]}"
              " with recursion depth 0 (0).")
    elif command.startswith("project -s"):
        print(f"Setting up project {words[-1]} (path {words[-2]})...")
        print(f"Processed 1 (/etc/projects and cmdline) paths for project {words[-1]}"
              " with recursion depth infinite (-1).")
        state["carried"][words[-2]] = words[-1]
    elif command.startswith("limit") and limit_error:
        print("xfs_quota: cannot set limits: " + limit_error, file=sys.stderr)
        sys.exit(1)
    elif command.startswith("limit"):
        state["limits"][words[-1]] = int(words[-2].split("=")[1])
with open(os.path.join(tools, "state.lock"), "a") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    latest = json.load(open(path)) if os.path.exists(path) else {"carried": {}, "limits": {}}
    for key in ("carried", "limits"):
        latest[key].update(state[key])
    with open(path, "w") as out:
        json.dump(latest, out)
"""


def stand_in(tools: Path, *, enforcement: str = "ON", limit_error: str = "") -> Path:
    """An xfs_quota that appends its argv (JSON) to tools/argv, keeps the project ID each
    directory carries and each project's limit in tools/state, and answers like the real one."""
    tools.mkdir(exist_ok=True)
    (tools / "settings").write_text(json.dumps([enforcement, limit_error]))
    script = tools / "xfs_quota"
    script.write_text(STAND_IN.replace("STATE_ON.format", f"{STATE_ON!r}.format"))
    script.chmod(0o755)
    return tools / "argv"


def carried(tools: Path) -> dict[str, str]:
    """The project ID each directory carries, as the stand-in's filesystem has it."""
    return dict(json.loads((tools / "state").read_text())["carried"])


def run_quota(
    volume: Path,
    *,
    tools: Path | None = None,
    mountinfo: Path | None = None,
    mode: str = "set",
    project_id: int = 1234567,
    **extra: str,
) -> subprocess.CompletedProcess[str]:
    run = start_quota(
        volume, tools=tools, mountinfo=mountinfo, mode=mode, project_id=project_id, **extra
    )
    out, err = run.communicate(timeout=30)
    return subprocess.CompletedProcess(run.args, run.returncode, out, err)


def start_quota(
    volume: Path,
    *,
    tools: Path | None = None,
    mountinfo: Path | None = None,
    mode: str = "set",
    project_id: int = 1234567,
    **extra: str,
) -> subprocess.Popen[str]:
    env = {
        "PATH": f"{tools}:/usr/bin:/bin" if tools else "/usr/bin:/bin",
        "VOL_DIR": str(volume),
        "LPS_BASE_VIEW": str(volume.parent),
        "LPS_SIZE": "1073741824",
        "LPS_PROJECT_ID": str(project_id),
        "LPS_PROJECT_ID_PROBES": str(PROJECT_ID_PROBES),
        "LPS_QUOTA_MODE": mode,
        **extra,
    }
    if mountinfo is not None:
        env["LPS_MOUNTINFO"] = str(mountinfo)
    return subprocess.Popen(
        ["/bin/sh", "-c", QUOTA_SCRIPT, "quota"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
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
        ["-x", *foreign, "-c", f"project -c -d 0 -p {volume} 0", str(volume)],
        ["-x", *foreign, "-c", "report -p -n -N", str(volume)],
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


def xfs_with_prjquota(tmp_path: Path) -> Path:
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(mountinfo_line("/", "xfs", "rw,pquota"))
    return mountinfo


def test_resize_sets_only_the_new_limit_of_the_id_the_setup_took(tmp_path: Path) -> None:
    tools, mountinfo = tmp_path / "tools", xfs_with_prjquota(tmp_path)
    record = stand_in(tools)
    volume = tmp_path / "pvc-1"
    volume.mkdir()
    (tmp_path / "pvc-0").mkdir()
    assert run_quota(tmp_path / "pvc-0", tools=tools, mountinfo=mountinfo).returncode == 0
    assert run_quota(volume, tools=tools, mountinfo=mountinfo).returncode == 0
    done = run_quota(volume, tools=tools, mountinfo=mountinfo, mode="resize", LPS_SIZE="2048")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "quota 1234568 2048"
    assert recorded(record)[-1] == ["-x", "-c", "limit -p bhard=2048 1234568", str(volume)]


def test_colliding_hashes_get_different_ids_and_a_retry_keeps_its_own(tmp_path: Path) -> None:
    """Two volumes whose hashed IDs collide: the second takes the next free ID; a retried
    setup of the first finds the ID its directory carries and keeps it."""
    tools, mountinfo = tmp_path / "tools", xfs_with_prjquota(tmp_path)
    stand_in(tools)
    first, second = tmp_path / "pvc-a", tmp_path / "pvc-b"
    first.mkdir()
    second.mkdir()
    outputs = [
        run_quota(volume, tools=tools, mountinfo=mountinfo).stdout.strip()
        for volume in (first, second, first)
    ]
    assert outputs == [
        "quota 1234567 1073741824",
        "quota 1234568 1073741824",
        "quota 1234567 1073741824",
    ]
    assert carried(tools) == {str(first): "1234567", str(second): "1234568"}


def test_concurrent_setups_cannot_take_the_same_id(tmp_path: Path) -> None:
    """The stand-in waits between listing the IDs in use and the next call, as a busy node
    may: without the lock on the base path the setups would all find the same ID free."""
    tools, mountinfo = tmp_path / "tools", xfs_with_prjquota(tmp_path)
    stand_in(tools)
    volumes = [tmp_path / f"pvc-{n}" for n in range(3)]
    for volume in volumes:
        volume.mkdir()
    runs = [
        start_quota(v, tools=tools, mountinfo=mountinfo, STAND_IN_REPORT_SECONDS="0.5")
        for v in volumes
    ]
    for run in runs:
        _, err = run.communicate(timeout=30)
        assert run.returncode == 0, err
    taken = carried(tools)
    assert sorted(taken.values()) == ["1234567", "1234568", "1234569"], taken


def test_a_volume_path_that_reads_like_an_error_is_no_failure(tmp_path: Path) -> None:
    """xfs_quota's output names the path, which is the tenant's to name."""
    tools, mountinfo = tmp_path / "tools", xfs_with_prjquota(tmp_path)
    stand_in(tools)
    volume = tmp_path / "ns-cannot-lose-it" / "mirror-errors"
    volume.mkdir(parents=True)
    done = run_quota(volume, tools=tools, mountinfo=mountinfo)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "quota 1234567 1073741824"


def test_the_resize_refuses_an_id_outside_the_volumes_own_run(tmp_path: Path) -> None:
    """A directory whose project ID was changed on the node (a root tenant can) never makes
    the resize raise another project's limit."""
    tools, mountinfo = tmp_path / "tools", xfs_with_prjquota(tmp_path)
    record = stand_in(tools)
    volume = tmp_path / "pvc-1"
    volume.mkdir()
    assert run_quota(volume, tools=tools, mountinfo=mountinfo, project_id=5_000_000).returncode == 0
    done = run_quota(volume, tools=tools, mountinfo=mountinfo, mode="resize")
    assert done.returncode == 1
    assert "carries project ID 5000000, not one of this volume's" in done.stderr
    assert not any(c.startswith("limit") for c in recorded(record)[-1][1:-1])
    (tmp_path / "pvc-2").mkdir()
    done = run_quota(tmp_path / "pvc-2", tools=tools, mountinfo=mountinfo, mode="resize")
    assert done.stdout.strip().startswith("no-quota"), "set up without a quota: nothing to raise"


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
    (tmp_path / "pvc-1").mkdir()
    done = run_quota(tmp_path / "pvc-1", tools=tmp_path / "tools", mountinfo=mountinfo)
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


# A helper container's mount table: its root, and the volume's hostPath bind-mounted at its own
# path, which the kernel writes with a space, tab, line break or backslash as an octal escape.
ROOT_LINE = "1500 1400 0:52 / / rw,relatime - overlay overlay rw,lowerdir=/l,upperdir=/u\n"


@pytest.mark.parametrize(
    ("folder", "written"),
    [
        ("a\tb", "a\\011b"),
        ("a\\b", "a\\134b"),
        ("a b", "a\\040b"),
        ("a\\tb", "a\\134tb"),  # what `awk -v` turned into a tab
        ("a\\011b", "a\\134011b"),  # a literal escape: decoded once, not twice
    ],
    ids=["tab", "backslash", "space", "backslash-t", "backslash-octal"],
)
def test_a_volume_path_the_mount_table_escapes_is_found_and_fails_the_setup(
    tmp_path: Path, folder: str, written: str
) -> None:
    """The quota once compared the mount table's escaped mount points undoing only `\\040`,
    with the path read through `awk -v`: a path with a tab or backslash matched `/` and the
    setup said no-quota (exit 0), leaving the volume without its limit on a filesystem that
    enforces one. The path is found now; xfs_quota cannot be given it, so the setup fails."""
    volume = tmp_path / "ns" / "claim" / folder
    volume.mkdir(parents=True)
    mountinfo = tmp_path / "mountinfo"
    own = f"/ns/claim/{written} {tmp_path}/ns/claim/{written}"
    mountinfo.write_text(
        ROOT_LINE + f"1501 1500 7:7 {own} rw,relatime - xfs /dev/loop7 rw,attr2,inode64,prjquota\n"
    )
    record = stand_in(tmp_path / "tools")
    done = run_quota(volume, tools=tmp_path / "tools", mountinfo=mountinfo)
    assert not done.stdout.startswith("no-quota"), done.stdout
    assert done.returncode == 1, done.stdout
    assert done.stderr == (
        f"cannot set a project quota on {volume}: it has a blank, quote or backslash\n"
    )
    assert recorded(record) == [["-x", "-c", "state -p", str(volume)]]


@pytest.mark.parametrize(
    ("mounts", "found"),
    [
        ({"da": "xfs prjquota"}, "no-quota overlay has no project quotas"),
        ({"data": "xfs prjquota", "data/pvc-1": "ext4 rw"}, "no-quota ext4 is mounted"),
        ({"data/pvc-1": "ext4 rw", "data": "xfs prjquota"}, "no-quota ext4 is mounted"),
        ({"data/pvc": "xfs prjquota"}, "no-quota overlay has no project quotas"),
        ({"data": "ext4 rw", "data/pvc-1": "xfs prjquota"}, "quota 1234567"),
    ],
    ids=["sibling-prefix", "nested", "nested-listed-first", "name-prefix", "own-mount"],
)
def test_the_mount_holding_the_volume_is_the_longest_whole_component_prefix(
    tmp_path: Path, mounts: dict[str, str], found: str
) -> None:
    volume = tmp_path / "data" / "pvc-1"
    volume.mkdir(parents=True)
    mountinfo = tmp_path / "mountinfo"
    lines = [ROOT_LINE]
    for at, fs in mounts.items():
        fstype, options = fs.split()
        lines.append(mountinfo_line(f"{tmp_path}/{at}", fstype, options))
    mountinfo.write_text("".join(lines))
    stand_in(tmp_path / "tools")
    done = run_quota(volume, tools=tmp_path / "tools", mountinfo=mountinfo)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(found), done.stdout
