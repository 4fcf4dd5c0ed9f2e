"""A CSI clone's copy made by the node's executor for real: GNU cp and the fixed scripts on
base paths in a temporary directory, the volumes' locks and records in a state directory, as
the node plugin runs them. Nothing is mocked; interleavings are forced with a setup script
that waits for a file while the clone's setup holds both locks."""

from __future__ import annotations

import dataclasses
import os
import resource
import shutil
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from provisioner.node_volumes.clone_copy import copied_mark, empty_directory, is_copied
from provisioner.node_volumes.sandbox import View
from provisioner.node_volumes.volume_executor import Outcome, VolumeExecutor
from provisioner.node_volumes.volume_steps import GNU_CP, clone_step
from provisioner.objects.node_handoff import NodeCloneSource, NodeRemoval, VolumeSetup
from tests.provisioner.node_volumes.test_volume_executor import Stand, counting_setup

SOURCE = "pvc-src"
CLONE = "pvc-clone"


def clone_setup(stand: Stand, source: VolumeSetup, **changes: object) -> VolumeSetup:
    given = NodeCloneSource(SOURCE, source.path, source.base_path, "uid-src")
    return VolumeSetup(
        str(stand.base),
        str(stand.base / "ns" / "clone"),
        "Filesystem",
        1 << 20,
        clone_source=dataclasses.replace(given, **changes),  # type: ignore[arg-type]
    )


def source_with_data(stand: Stand, executor: VolumeExecutor) -> VolumeSetup:
    source = stand.setup(relative="ns/src")
    assert executor.set_up(SOURCE, source.path, source) == Outcome("done")
    root = Path(source.path)
    (root / "data").write_text("the tenant's data")
    (root / ".hidden").write_text("dot files too")
    (root / "sub").mkdir(mode=0o700)
    (root / "sub").chmod(0o700)
    owned = root / "sub" / "owned"
    owned.write_text("someone else's")
    os.chown(owned, 1234, 5678)
    owned.chmod(0o640)
    (root / "link").symlink_to("/etc/passwd")
    os.link(root / "data", root / "hard")
    return source


@pytest.fixture
def stand(tmp_path: Path) -> Stand:
    root = tmp_path.resolve()
    return Stand(root, counting_setup(root))


def test_the_clone_step_is_gnu_cp_of_the_source_s_contents_keeping_everything() -> None:
    step = clone_step("/opt/lp/src", "/opt/lp/clone")
    assert step.name == "clone"
    assert step.argv == (
        GNU_CP,
        "-a",
        "--reflink=auto",
        "--sparse=auto",
        "/opt/lp/src/.",
        "/opt/lp/clone/",
    )
    assert step.env == {}
    # What it sees of the node: the source read-only, the new directory, nothing else.
    assert step.view == View(read_write=("/opt/lp/clone",), read_only=("/opt/lp/src",))


def test_a_clone_gets_the_source_s_data_owners_modes_and_links(stand: Stand) -> None:
    executor = stand.executor()
    source = source_with_data(stand, executor)
    setup = clone_setup(stand, source)
    assert executor.set_up(CLONE, setup.path, setup) == Outcome("done")
    copy = Path(setup.path)
    assert (copy / "data").read_text() == "the tenant's data"
    assert (copy / ".hidden").read_text() == "dot files too"
    owned = (copy / "sub" / "owned").stat()
    assert (owned.st_uid, owned.st_gid, stat.S_IMODE(owned.st_mode)) == (1234, 5678, 0o640)
    assert stat.S_IMODE((copy / "sub").stat().st_mode) == 0o700
    assert (copy / "link").is_symlink() and (copy / "link").readlink() == Path("/etc/passwd")
    assert (copy / "hard").stat().st_ino == (copy / "data").stat().st_ino
    # The source is untouched, and the clone is set up once: a second call does nothing.
    assert (Path(source.path) / "data").read_text() == "the tenant's data"
    (copy / "data").write_text("changed in the clone")
    assert executor.set_up(CLONE, setup.path, setup) == Outcome("already")
    assert (copy / "data").read_text() == "changed in the clone"


def test_a_whole_copy_in_use_survives_a_node_that_lost_its_records(stand: Stand) -> None:
    """The plugin's state directory lost (a node's root disk replaced, its data disk kept),
    the source gone from this node meanwhile: the clone's setup runs again and finds its
    directory full of what its pod wrote. The copy's mark says it is this clone's whole copy:
    nothing is emptied or copied over, no source is asked for. Without the mark the same setup
    would empty the directory as a partial copy (the test below)."""
    executor = stand.executor()
    source = source_with_data(stand, executor)
    setup = clone_setup(stand, source)
    assert executor.set_up(CLONE, setup.path, setup) == Outcome("done")
    mark = copied_mark(setup.base_path, setup.path)
    assert mark.read_text() == CLONE
    (Path(setup.path) / "data").write_text("written by the clone's pod")
    removal = NodeRemoval(SOURCE, source.path, SOURCE, False, True, "uid-src")
    torn = executor.tear_down(
        SOURCE, source.path, source, removal, phase="Released", claim_uid="uid-src",
        confirm=lambda: None,
    )  # fmt: skip
    assert torn == Outcome("done") and not Path(source.path).exists()
    shutil.rmtree(stand.state_dir)
    assert stand.executor().set_up(CLONE, setup.path, setup) == Outcome("done")
    assert (Path(setup.path) / "data").read_text() == "written by the clone's pod"
    assert is_copied(setup.base_path, setup.path, CLONE)
    # Another volume's mark at the same path is not this clone's.
    assert not is_copied(setup.base_path, setup.path, "pvc-other")


def test_the_copy_s_mark_goes_with_the_directory(stand: Stand) -> None:
    executor = stand.executor()
    source = source_with_data(stand, executor)
    setup = clone_setup(stand, source)
    assert executor.set_up(CLONE, setup.path, setup) == Outcome("done")
    mark = copied_mark(setup.base_path, setup.path)
    assert mark.exists() and stand.marker(setup.path).exists()
    removal = NodeRemoval(CLONE, setup.path, CLONE, False, True, "uid-clone")
    torn = executor.tear_down(
        CLONE, setup.path, setup, removal, phase="Released", claim_uid="uid-clone",
        confirm=lambda: None,
    )  # fmt: skip
    assert torn == Outcome("done")
    assert not Path(setup.path).exists()
    assert not mark.exists() and not stand.marker(setup.path).exists()


def test_a_source_not_set_up_on_this_node_waits_and_nothing_is_made(stand: Stand) -> None:
    executor = stand.executor()
    source = stand.setup(relative="ns/src")
    Path(source.path).mkdir(parents=True)  # a directory, but not one this node set up
    (Path(source.path) / "data").write_text("not yet a volume's")
    setup = clone_setup(stand, source)
    outcome = executor.set_up(CLONE, setup.path, setup)
    assert outcome.kind == "busy"
    assert "not set up on this node yet" in outcome.message
    assert not Path(setup.path).exists()
    assert stand.setup_runs() == 0


def test_a_removed_source_is_never_copied(stand: Stand) -> None:
    executor = stand.executor()
    source = source_with_data(stand, executor)
    removal = NodeRemoval(SOURCE, source.path, SOURCE, False, True, "uid-src")
    torn = executor.tear_down(
        SOURCE,
        source.path,
        source,
        removal,
        phase="Released",
        claim_uid="uid-src",
        confirm=lambda: None,
    )
    assert torn == Outcome("done")
    setup = clone_setup(stand, source)
    outcome = executor.set_up(CLONE, setup.path, setup)
    assert outcome.kind == "refused"
    assert "was removed from this node before its data was copied" in outcome.message
    assert not Path(setup.path).exists()


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"path": "/etc"}, "not inside a base path of this node"),
        ({"path": "/etc/x", "base_path": "/etc"}, "not inside a base path of this node"),
        ({"base_path": "/"}, "its setup names the base path '/'"),
        ({"path": "BASE/ns/../../x"}, "is not an absolute path without '.', '..'"),
        ({"path": "BASE/ns"}, "holds the new directory"),
        ({"volume_name": CLONE}, "is the volume itself"),
    ],
)
def test_a_source_outside_this_node_s_base_paths_is_refused_before_anything_runs(
    stand: Stand, changes: dict[str, str], says: str
) -> None:
    executor = stand.executor()
    source = source_with_data(stand, executor)
    runs = stand.setup_runs()
    given = {key: value.replace("BASE", str(stand.base)) for key, value in changes.items()}
    setup = clone_setup(stand, source, **given)
    outcome = executor.set_up(CLONE, setup.path, setup)
    assert outcome.kind == "refused", outcome
    assert says in outcome.message
    assert not Path(setup.path).exists()
    assert stand.setup_runs() == runs


def test_a_source_swapped_for_a_symbolic_link_is_not_copied(stand: Stand) -> None:
    executor = stand.executor()
    source = source_with_data(stand, executor)
    elsewhere = stand.root / "elsewhere"
    Path(source.path).rename(elsewhere)
    Path(source.path).symlink_to(elsewhere)
    setup = clone_setup(stand, source)
    outcome = executor.set_up(CLONE, setup.path, setup)
    assert outcome.kind == "refused"
    assert "no directory on this node (gone, or a symbolic link)" in outcome.message
    assert not Path(setup.path).exists()


def test_the_source_s_teardown_waits_while_its_copy_runs(tmp_path: Path) -> None:
    """The clone's setup holds the source's lock from before its setup steps to the end of
    the copy: its `create` waits here for a file, and meanwhile the source's teardown, which
    the permit allows, is busy and removes nothing."""
    root = tmp_path.resolve()
    go = root / "base" / "go"
    waits = f'case "$VOL_DIR" in *clone) while [ ! -e "{go}" ]; do sleep 0.05; done;; esac\n'
    stand = Stand(root, counting_setup(root, waits))
    executor = stand.executor()
    source = source_with_data(stand, executor)
    setup = clone_setup(stand, source)
    outcomes: list[Outcome] = []
    copier = threading.Thread(
        target=lambda: outcomes.append(executor.set_up(CLONE, setup.path, setup))
    )
    copier.start()
    deadline = time.monotonic() + 20
    while stand.setup_runs() < 2:  # the clone's setup is running: both locks are held
        assert time.monotonic() < deadline
        time.sleep(0.05)
    removal = NodeRemoval(SOURCE, source.path, SOURCE, False, True, "uid-src")

    def tear_down_source(lock_wait: float) -> Outcome:
        return stand.executor(lock_wait=lock_wait).tear_down(
            SOURCE,
            source.path,
            source,
            removal,
            phase="Released",
            claim_uid="uid-src",
            confirm=lambda: None,
        )

    assert tear_down_source(0.3).kind == "busy"
    assert (Path(source.path) / "data").read_text() == "the tenant's data"
    go.touch()
    copier.join(30)
    assert outcomes == [Outcome("done")]
    assert (Path(setup.path) / "sub" / "owned").read_text() == "someone else's"
    assert tear_down_source(5) == Outcome("done")
    assert not Path(source.path).exists()
    assert (Path(setup.path) / "data").read_text() == "the tenant's data"


def test_an_earlier_attempt_s_partial_copy_is_emptied_before_the_copy(tmp_path: Path) -> None:
    root = tmp_path.resolve()
    leftover = (
        'case "$VOL_DIR" in *clone) mkdir -p "$VOL_DIR/stale/deep"; echo old > "$VOL_DIR/data";'
        ' ln -s / "$VOL_DIR/stale/root";; esac\n'
    )
    stand = Stand(root, counting_setup(root, "") + leftover)
    executor = stand.executor()
    source = source_with_data(stand, executor)
    setup = clone_setup(stand, source)
    assert executor.set_up(CLONE, setup.path, setup) == Outcome("done")
    copy = Path(setup.path)
    assert sorted(entry.name for entry in copy.iterdir()) == [
        ".hidden",
        "data",
        "hard",
        "link",
        "sub",
    ]
    assert (copy / "data").read_text() == "the tenant's data"


@pytest.fixture
def file_size_limit() -> Iterator[None]:
    """Files of this process's children stop at 256 KiB, as on a full disk: cp gets
    SIGXFSZ (or EFBIG) part way through a larger file and leaves a partial copy."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    yield
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


def test_a_failed_copy_empties_the_new_directory_and_the_clean_up_removes_it(
    stand: Stand, file_size_limit: None
) -> None:
    executor = stand.executor()
    source = source_with_data(stand, executor)
    (Path(source.path) / "big").write_bytes(os.urandom(1 << 20))
    bare = clone_setup(stand, source)
    permit = NodeRemoval(CLONE, bare.path, CLONE, True, False, "uid-clone")
    setup = dataclasses.replace(bare, clean_up=permit)
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 10, hard))
    outcome = executor.set_up(CLONE, setup.path, setup)
    resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, hard))
    assert outcome.kind == "failed", outcome
    assert "setup step clone failed" in outcome.message
    assert f"copying source volume {SOURCE} ({source.path}) failed" in outcome.message
    assert f"{setup.path} was emptied" in outcome.message
    assert not Path(setup.path).exists(), "emptied, then removed with the gate's permit"
    assert (Path(source.path) / "data").read_text() == "the tenant's data"
    # Not set up: a retry copies again, and this time it fits.
    again = executor.set_up(CLONE, setup.path, setup)
    assert again == Outcome("done"), again
    assert (Path(setup.path) / "big").stat().st_size == 1 << 20


def test_a_failed_copy_without_a_clean_up_permit_leaves_the_directory_empty(
    stand: Stand, file_size_limit: None
) -> None:
    executor = stand.executor()
    source = source_with_data(stand, executor)
    (Path(source.path) / "big").write_bytes(os.urandom(1 << 20))
    setup = clone_setup(stand, source)
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 10, hard))
    outcome = executor.set_up(CLONE, setup.path, setup)
    resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, hard))
    assert outcome.kind == "failed", outcome
    assert list(Path(setup.path).iterdir()) == []


def test_emptying_never_follows_a_symbolic_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("not ours")
    target = tmp_path / "target"
    (target / "a" / "b").mkdir(parents=True)
    (target / "a" / "to-outside").symlink_to(outside)
    (target / "to-outside").symlink_to(outside)
    (target / "file").write_text("x")
    assert empty_directory(str(target)) is True
    assert list(target.iterdir()) == []
    assert (outside / "keep").read_text() == "not ours"
    assert empty_directory(str(target)) is False
    linked = tmp_path / "linked"
    linked.symlink_to(outside)
    with pytest.raises(OSError):
        empty_directory(str(linked))
    assert (outside / "keep").exists()
