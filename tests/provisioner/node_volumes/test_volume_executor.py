"""The node's executor run for real: the fixed scripts and the config's setup and teardown by
/bin/sh, on base paths in a temporary directory of this machine, as the node plugin runs them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import stat
import threading
import time
from pathlib import Path

import pytest

from provisioner.configuration.config import (
    DEFAULT_HELPER_POD_YAML,
    DEFAULT_TEARDOWN_SCRIPT,
    BasePathRules,
    load_config_bundle,
)
from provisioner.csi.node_paths import node_base_paths
from provisioner.node_volumes.volume_checks import missing_base_path_refusal
from provisioner.node_volumes.volume_executor import Outcome, VolumeExecutor
from provisioner.node_volumes.volume_state import VolumeState
from provisioner.objects.node_handoff import NodeRemoval, VolumeSetup
from provisioner.provisioning.fresh_directory import OWNERS_DIR

NODE = "n1"
CLAIM_UID = "uid-1"


class Stand:
    """A node: a base path, the plugin's state directory, and executors on them."""

    def __init__(
        self, root: Path, setup_script: str, timeout: int = 30, *, base_made: bool = True
    ) -> None:
        """`base_made`: the base path exists (one `"create": true` lets the plugin make);
        else it is missing, two levels deep, and config.json gives it as a plain path (which
        must exist)."""
        self.root = root
        self.base = root / "base" if base_made else root / "disk" / "base"
        if base_made:
            self.base.mkdir()
        self.state_dir = root / "state"
        self.setups = self.base / "setups"
        create = ', "create": true' if base_made else ""
        config = (
            f'{{"nodePathMap": [{{"node": "{NODE}", "paths": [{{"path": "{self.base}"{create}'
            f'}}]}}], "cmdTimeoutSeconds": {timeout}}}'
        )
        self.bundle = load_config_bundle(
            config, setup_script, DEFAULT_TEARDOWN_SCRIPT, DEFAULT_HELPER_POD_YAML
        )

    def executor(self, lock_wait: float | None = None) -> VolumeExecutor:
        return VolumeExecutor(
            NODE,
            self.bundle,
            node_base_paths(self.bundle.config, NODE),
            VolumeState(self.state_dir),
            lock_wait_seconds=lock_wait,
        )

    def setup(self, name: str = "pvc-1", relative: str = "ns/claim") -> VolumeSetup:
        return VolumeSetup(str(self.base), str(self.base / relative), "Filesystem", 1 << 20)

    def marker(self, path: str) -> Path:
        return self.base / OWNERS_DIR / hashlib.sha256(path.encode()).hexdigest()

    def setup_runs(self) -> int:
        return len(self.setups.read_text().splitlines()) if self.setups.exists() else 0


def counting_setup(root: Path, extra: str = "", base: str = "base") -> str:
    """Counts its runs in a file of the base path: a step sees nothing of the node besides
    (sandbox.py), and what it writes elsewhere is gone with its sandbox."""
    return f'set -eu\necho run >> "{root}/{base}/setups"\n{extra}mkdir -p "$VOL_DIR"\n'


@pytest.fixture
def stand(tmp_path: Path) -> Stand:
    root = tmp_path.resolve()
    return Stand(root, counting_setup(root))


def permit(path: str, **changes: object) -> NodeRemoval:
    fields: dict[str, object] = {
        "volume_name": "pvc-1",
        "path": path,
        "owner": "pvc-1",
        "made_only": False,
        "absent_ok": True,
        "claim_uid": CLAIM_UID,
    }
    fields.update(changes)
    return NodeRemoval(**fields)  # type: ignore[arg-type]


def tear_down(
    executor: VolumeExecutor,
    setup: VolumeSetup,
    removal: NodeRemoval,
    *,
    volume_path: str | None = None,
    phase: str = "Released",
    claim_uid: str = CLAIM_UID,
    stale: str | None = None,
) -> Outcome:
    return executor.tear_down(
        "pvc-1",
        volume_path or setup.path,
        setup,
        removal,
        phase=phase,
        claim_uid=claim_uid,
        confirm=lambda: stale,
    )


def test_a_setup_makes_the_directory_and_its_owner_marker_once(stand: Stand) -> None:
    setup = stand.setup()
    executor = stand.executor()
    assert executor.set_up("pvc-1", setup.path, setup) == Outcome("done")
    assert Path(setup.path).is_dir()
    assert stand.marker(setup.path).read_text() == "pvc-1\n"
    assert executor.set_up("pvc-1", setup.path, setup) == Outcome("already")
    assert stand.setup_runs() == 1


def test_a_missing_base_path_that_may_be_made_is_made_as_the_kubelet_would(
    tmp_path: Path,
) -> None:
    """On the node nobody makes a base path for the plugin (for a helper pod the kubelet does,
    its `DirectoryOrCreate` hostPath): the setup makes it, mode 0755, then the volume in it."""
    root = tmp_path.resolve()
    stand = Stand(root, counting_setup(root))
    stand.base.rmdir()
    setup = stand.setup()
    assert stand.executor().set_up("pvc-1", setup.path, setup) == Outcome("done")
    assert stat.S_IMODE(stand.base.stat().st_mode) == 0o755
    assert Path(setup.path).is_dir()
    assert stand.marker(setup.path).read_text() == "pvc-1\n"


def test_a_missing_base_path_that_must_exist_fails_the_setup_until_it_is_made(
    tmp_path: Path,
) -> None:
    root = tmp_path.resolve()
    stand = Stand(root, counting_setup(root, base="disk/base"), base_made=False)
    setup = stand.setup()
    executor = stand.executor()
    outcome = executor.set_up("pvc-1", setup.path, setup)
    assert outcome.kind == "failed"
    assert f"base path {stand.base} does not exist on this node" in outcome.message
    assert '"create": true' in outcome.message
    assert not (root / "disk").exists(), "nothing made on the way"
    assert stand.setup_runs() == 0
    stand.base.mkdir(parents=True)
    assert executor.set_up("pvc-1", setup.path, setup) == Outcome("done")


def test_a_missing_mount_point_base_path_is_never_made() -> None:
    refusal = missing_base_path_refusal("/mnt/disk", BasePathRules(create=True, mount_point=True))
    assert refusal is not None and "mount it" in refusal
    assert missing_base_path_refusal("/opt/x", BasePathRules(create=True)) is None


def test_a_directory_gone_after_its_setup_is_an_error_never_made_again(stand: Stand) -> None:
    setup = stand.setup()
    executor = stand.executor()
    assert executor.set_up("pvc-1", setup.path, setup).ok
    Path(setup.path).rmdir()
    outcome = executor.set_up("pvc-1", setup.path, setup)
    assert outcome.kind == "failed"
    assert "is gone" in outcome.message
    assert not Path(setup.path).exists()


def test_a_setup_outside_this_nodes_base_paths_runs_nothing(stand: Stand) -> None:
    elsewhere = stand.root / "elsewhere" / "claim"
    setup = VolumeSetup(str(stand.base), str(elsewhere), "Filesystem", 1)
    outcome = stand.executor().set_up("pvc-1", str(elsewhere), setup)
    assert outcome.kind == "refused"
    other_base = VolumeSetup(str(stand.root), str(stand.base / "x"), "Filesystem", 1)
    assert stand.executor().set_up("pvc-1", other_base.path, other_base).kind == "refused"
    named_elsewhere = stand.setup()
    assert stand.executor().set_up("pvc-1", str(stand.base / "y"), named_elsewhere).kind == (
        "refused"
    )
    assert stand.setup_runs() == 0
    assert not elsewhere.exists()


def test_a_failed_setup_removes_the_directory_it_made_with_the_gate_s_permit(
    tmp_path: Path,
) -> None:
    root = tmp_path.resolve()
    stand = Stand(root, counting_setup(root, 'echo "no disk today" >&2; exit 3\n'))
    bare = stand.setup()
    permit = NodeRemoval("pvc-1", bare.path, "pvc-1", True, False, "uid-1")
    setup = dataclasses.replace(bare, clean_up=permit)
    outcome = stand.executor().set_up("pvc-1", setup.path, setup)
    assert outcome.kind == "failed"
    assert "no disk today" in outcome.message
    assert not Path(setup.path).exists()
    assert not (stand.base / "ns").exists()
    assert not stand.marker(setup.path).exists()


def test_a_failed_setup_without_the_gate_s_permit_leaves_its_directory(tmp_path: Path) -> None:
    root = tmp_path.resolve()
    stand = Stand(root, counting_setup(root, 'echo "no disk today" >&2; exit 3\n'))
    setup = stand.setup()
    assert stand.executor().set_up("pvc-1", setup.path, setup).kind == "failed"
    assert Path(setup.path).is_dir(), "no permit: nothing removed"
    assert stand.marker(setup.path).exists()


def test_a_setup_past_its_timeout_is_killed(tmp_path: Path) -> None:
    root = tmp_path.resolve()
    stand = Stand(root, counting_setup(root, "sleep 30\n"), timeout=1)
    setup = stand.setup()
    started = time.monotonic()
    outcome = stand.executor().set_up("pvc-1", setup.path, setup)
    assert outcome.kind == "failed"
    assert "killed after 1s" in outcome.message
    assert time.monotonic() - started < 15


def test_a_teardown_with_its_permit_removes_the_directory(stand: Stand) -> None:
    setup = stand.setup()
    executor = stand.executor()
    assert executor.set_up("pvc-1", setup.path, setup).ok
    (Path(setup.path) / "data").write_text("tenant's")
    assert tear_down(executor, setup, permit(setup.path)) == Outcome("done")
    assert not Path(setup.path).exists()
    assert not stand.marker(setup.path).exists()
    assert sorted(stand.base.iterdir()) == [stand.base / OWNERS_DIR, stand.setups]


@pytest.mark.parametrize(
    ("removal", "overrides", "says"),
    [
        ("other path", {}, "hand-off names"),
        ("other volume", {}, "names volume"),
        ("", {"phase": "Bound"}, "not Released"),
        ("", {"claim_uid": "uid-2"}, "claim is uid-2"),
        ("", {"stale": "the PV was re-bound"}, "no longer current"),
        ("outside", {}, "not inside a base path"),
    ],
)
def test_a_forged_or_stale_permit_removes_nothing(
    stand: Stand, removal: str, overrides: dict[str, str], says: str
) -> None:
    setup = stand.setup()
    executor = stand.executor()
    assert executor.set_up("pvc-1", setup.path, setup).ok
    given = permit(setup.path)
    volume_path = None
    if removal == "other path":
        given = permit(str(stand.base / "ns" / "other"))
    elif removal == "other volume":
        given = permit(setup.path, volume_name="pvc-2", owner="pvc-2")
    elif removal == "outside":
        volume_path = str(stand.root / "state")
        given = permit(volume_path)
    outcome = tear_down(executor, setup, given, volume_path=volume_path, **overrides)
    assert outcome.kind == "refused"
    assert says in outcome.message
    assert Path(setup.path).is_dir()
    assert (stand.root / "state").is_dir()


def test_a_directory_another_volume_owns_now_is_not_removed(stand: Stand) -> None:
    setup = stand.setup()
    executor = stand.executor()
    assert executor.set_up("pvc-1", setup.path, setup).ok
    stand.marker(setup.path).write_text("pvc-9\n")
    outcome = tear_down(executor, setup, permit(setup.path))
    assert outcome.kind == "failed"
    assert "names pvc-9" in outcome.message
    assert Path(setup.path).is_dir()


def test_after_a_lost_mark_the_permit_seen_again_only_marks_again(stand: Stand) -> None:
    setup = stand.setup()
    executor = stand.executor()
    assert executor.set_up("pvc-1", setup.path, setup).ok
    assert tear_down(executor, setup, permit(setup.path)).kind == "done"
    # The PATCH's answer was lost; meanwhile the path holds a directory again, even one whose
    # marker names this volume: the second sighting must not remove anything.
    Path(setup.path).mkdir(parents=True)
    stand.marker(setup.path).write_text("pvc-1\n")
    assert tear_down(stand.executor(), setup, permit(setup.path)) == Outcome("already")
    assert Path(setup.path).is_dir()


def test_two_executors_on_one_volume_one_acts(tmp_path: Path) -> None:
    root = tmp_path.resolve()
    go = root / "base" / "go"
    waits = f'while [ ! -e "{go}" ]; do sleep 0.05; done\n'
    stand = Stand(root, counting_setup(root, waits))
    setup = stand.setup()
    first, second = stand.executor(), stand.executor()
    outcomes: dict[str, Outcome] = {}

    def run(name: str, executor: VolumeExecutor) -> None:
        outcomes[name] = executor.set_up("pvc-1", setup.path, setup)

    holder = threading.Thread(target=run, args=("first", first))
    holder.start()
    deadline = time.monotonic() + 20
    while stand.setup_runs() == 0:  # the first is inside its setup, holding the lock
        assert time.monotonic() < deadline
        time.sleep(0.05)
    impatient = stand.executor(lock_wait=0.3).set_up("pvc-1", setup.path, setup)
    assert impatient.kind == "busy"
    waiter = threading.Thread(target=run, args=("second", second))
    waiter.start()
    time.sleep(0.5)
    assert "second" not in outcomes
    go.touch()
    holder.join(30)
    waiter.join(30)
    assert outcomes == {"first": Outcome("done"), "second": Outcome("already")}
    assert stand.setup_runs() == 1


def test_a_directory_already_gone_is_marked_without_running_anything(stand: Stand) -> None:
    setup = stand.setup()
    assert tear_down(stand.executor(), setup, permit(setup.path)).kind == "already"
    assert tear_down(stand.executor(), setup, permit(setup.path)).kind == "already"
