"""The fixed `prepare` and `finish` scripts, run by /bin/sh on a real directory tree: the parents a
pathPattern made are removed with the volume, and a sibling's setup that races that removal
still succeeds (the interleaving is forced by a `mkdir` stand-in on PATH)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from provisioner.helper_pods.pod_shapes import FINISH_SCRIPT, PREPARE_SCRIPT
from provisioner.provisioning.base_path_checks import mountinfo_path
from provisioner.scans.node_scripts import PRESENCE_SCRIPT


def run_script(
    script: str,
    base: Path,
    volume: Path,
    path_prefix: Path | None = None,
    *,
    volume_name: str = "pvc-1",
    extra_env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "LPS_BASE": str(base), "VOL_DIR": str(volume)}
    # What `finish` gets from a teardown's removal permit (removal_gate): the marker names the
    # volume, or there is none.
    removal = {"LPS_REMOVAL_OWNER": volume_name, "LPS_REMOVAL_ABSENT_OK": "true"}
    env |= {"LPS_VOLUME": volume_name, **removal, **(extra_env or {})}
    if path_prefix is not None:
        env["PATH"] = f"{path_prefix}:{env['PATH']}"
    return subprocess.run(
        ["/bin/sh", "-c", script, "step"],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )


def make_base(tmp_path: Path) -> Path:
    base = tmp_path.resolve() / "base"
    base.mkdir()
    return base


def test_finish_removes_the_empty_parents_up_to_the_base_path(tmp_path: Path) -> None:
    base = make_base(tmp_path)
    volume = base / "team" / "claim" / "data"
    volume.mkdir(parents=True)
    done = run_script(FINISH_SCRIPT, base, volume)
    assert done.returncode == 0, done.stderr
    assert base.is_dir()
    assert list(base.iterdir()) == []


def test_finish_keeps_a_parent_that_holds_a_sibling(tmp_path: Path) -> None:
    base = make_base(tmp_path)
    (base / "team" / "gone").mkdir(parents=True)
    (base / "team" / "kept").mkdir()
    done = run_script(FINISH_SCRIPT, base, base / "team" / "gone")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (base / "team").iterdir()) == ["kept"]


def test_finish_of_a_volume_in_the_base_path_keeps_the_base_path(tmp_path: Path) -> None:
    base = make_base(tmp_path)
    (base / "pvc-1").mkdir()
    done = run_script(FINISH_SCRIPT, base, base / "pvc-1")
    assert done.returncode == 0, done.stderr
    assert base.is_dir() and list(base.iterdir()) == []


def test_a_retried_finish_removes_the_parents_its_first_run_left(tmp_path: Path) -> None:
    base = make_base(tmp_path)
    (base / "team" / "inner").mkdir(parents=True)
    done = run_script(FINISH_SCRIPT, base, base / "team" / "inner" / "claim")
    assert done.returncode == 0, done.stderr
    assert list(base.iterdir()) == []


def test_finish_never_goes_through_a_symbolic_link(tmp_path: Path) -> None:
    base = make_base(tmp_path)
    elsewhere = tmp_path.resolve() / "elsewhere"
    (elsewhere / "claim").mkdir(parents=True)
    (base / "team").symlink_to(elsewhere)
    done = run_script(FINISH_SCRIPT, base, base / "team" / "claim")
    assert done.returncode == 1
    assert "is a symbolic link" in done.stderr
    assert (elsewhere / "claim").is_dir()
    assert (base / "team").is_symlink()


def test_finish_refuses_a_volume_the_teardown_left_content_in(tmp_path: Path) -> None:
    base = make_base(tmp_path)
    volume = base / "team" / "claim"
    volume.mkdir(parents=True)
    (volume / "left.txt").write_text("x")
    done = run_script(FINISH_SCRIPT, base, volume)
    assert done.returncode == 1
    assert "left 1 entries" in done.stderr
    assert (volume / "left.txt").exists()


def test_a_setup_racing_a_siblings_finish_for_their_parent_still_succeeds(tmp_path: Path) -> None:
    """prepare(B) finds <base>/team, then, just before it makes <base>/team/b, finish(A) removes
    <base>/team/a and the then empty <base>/team: prepare's mkdir fails, and it walks again."""
    base = make_base(tmp_path)
    sibling = base / "team" / "a"
    sibling.mkdir(parents=True)
    tools = tmp_path.resolve() / "tools"
    tools.mkdir()
    finish = tools / "finish.sh"
    finish.write_text(FINISH_SCRIPT)
    raced = tools / "raced"
    stand_in = tools / "mkdir"
    stand_in.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "{base}/team/b" ] && [ ! -e "{raced}" ]; then\n'
        f'  touch "{raced}"\n'
        f'  VOL_DIR="{sibling}" /bin/sh "{finish}" || exit 99\n'
        "fi\n"
        'exec /bin/mkdir "$@"\n'
    )
    stand_in.chmod(0o755)
    done = run_script(PREPARE_SCRIPT, base, base / "team" / "b", path_prefix=tools)
    assert raced.exists(), "the stand-in never forced the interleaving"
    assert done.returncode == 0, done.stderr
    assert "vanished" in done.stderr or "again" in done.stderr
    assert (base / "team" / "b").is_dir()
    assert not sibling.exists()


def test_prepare_never_goes_through_a_symbolic_link(tmp_path: Path) -> None:
    base = make_base(tmp_path)
    elsewhere = tmp_path.resolve() / "elsewhere"
    elsewhere.mkdir()
    (base / "team").symlink_to(elsewhere)
    done = run_script(PREPARE_SCRIPT, base, base / "team" / "claim")
    assert done.returncode == 1
    assert "is a symbolic link" in done.stderr
    assert list(elsewhere.iterdir()) == []
    assert (base / "team").is_symlink()


def presence(base: Path, volume: Path) -> tuple[int, str]:
    result = base.parent / "presence-result"
    done = run_script(PRESENCE_SCRIPT, base, volume, extra_env={"LPS_RESULT": str(result)})
    return done.returncode, result.read_text().strip() if result.exists() else done.stderr


def test_the_presence_look_tells_a_gone_directory_from_one_still_there(tmp_path: Path) -> None:
    """Asked after a teardown pod that never started (a hostPath `Directory` it waits for)."""
    base = make_base(tmp_path)
    assert presence(base, base / "team" / "claim") == (0, "gone")
    (base / "team" / "claim").mkdir(parents=True)
    assert presence(base, base / "team" / "claim") == (0, "present")


def test_the_presence_look_proves_nothing_through_a_symbolic_link(tmp_path: Path) -> None:
    base = make_base(tmp_path)
    (base / "team").symlink_to(tmp_path / "nowhere")
    code, said = presence(base, base / "team" / "claim")
    assert code == 1
    assert "is a symbolic link" in said


def test_the_presence_look_never_says_gone_through_a_mount_point_with_no_disk(
    tmp_path: Path,
) -> None:
    """A base path declared a mount point (mountPoint) whose disk is not mounted: its volumes'
    directories are on that disk, and only seem gone through the empty mount point. The look
    refuses (nothing is proven) with what to do, as `prepare` does; once the helper's mount
    table shows a filesystem's root there, it answers."""
    base = make_base(tmp_path)
    volume = base / "team" / "claim"
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text("1500 1400 0:52 / / rw,relatime - overlay overlay rw\n")
    result = tmp_path / "presence-result"
    env = {
        "LPS_RESULT": str(result),
        "LPS_MOUNT_POINT": mountinfo_path(str(base)),
        "LPS_MOUNTINFO": str(mountinfo),
    }
    done = run_script(PRESENCE_SCRIPT, base, volume, extra_env=env)
    assert done.returncode == 1
    assert not result.exists(), "the look answered"
    assert f"its base path {base} is declared a mount point" in done.stderr
    assert "no filesystem is mounted there on this node: mount it" in done.stderr
    with mountinfo.open("a") as table:
        table.write(f"1501 1500 7:7 / {mountinfo_path(str(base))} rw - xfs /dev/loop7 rw\n")
    done = run_script(PRESENCE_SCRIPT, base, volume, extra_env=env)
    assert (done.returncode, result.read_text().strip()) == (0, "gone")
