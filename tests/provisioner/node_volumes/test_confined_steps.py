"""Steps run for real, confined by bubblewrap (sandbox.py) as the node plugin runs them: a step
writes in its own base path, and finds nothing else of the node (another base path, the
kubelet's pods, the plugin's token), while a setup still makes, chowns and chmods its
directory and a deadline still kills the whole step."""

from __future__ import annotations

import pwd
import shutil
import time
from pathlib import Path

import pytest

from provisioner.configuration.config import (
    DEFAULT_HELPER_POD_YAML,
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
    ConfigBundle,
    load_config_bundle,
)
from provisioner.node_volumes.sandbox import View
from provisioner.node_volumes.step_runner import run_step, run_steps, sandbox_problem
from provisioner.node_volumes.volume_steps import NodeStep, VolumeTarget, node_steps
from provisioner.objects.node_handoff import VolumeSetup

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap (bubblewrap)")


class Node:
    """A node's files in a temporary directory: this volume's base path, another base path
    with a tenant's data, a stand-in for the kubelet's pod directory and a token."""

    def __init__(self, root: Path) -> None:
        self.base = root / "base"
        self.base.mkdir()
        self.outside = {
            "another base path": root / "other-base" / "ns" / "claim" / "data",
            "the kubelet's pods": root / "kubelet" / "pods" / "uid-2" / "volumes" / "secret",
            "the plugin's token": root / "serviceaccount" / "token",
        }
        for path in self.outside.values():
            path.parent.mkdir(parents=True)
            path.write_text("not yours\n")

    def bundle(self, setup_script: str, timeout: int = 30) -> ConfigBundle:
        config = (
            f'{{"nodePathMap": [{{"node": "n1", "paths": [{{"path": "{self.base}"}}]}}],'
            f' "cmdTimeoutSeconds": {timeout}}}'
        )
        return load_config_bundle(
            config, setup_script, DEFAULT_TEARDOWN_SCRIPT, DEFAULT_HELPER_POD_YAML
        )

    def target(self, user: str = "", group: str = "", perm: str = "") -> VolumeTarget:
        path = str(self.base / "ns" / "claim")
        setup = VolumeSetup(
            str(self.base), path, "Filesystem", 1, vol_user=user, vol_group=group, vol_perm=perm
        )
        return VolumeTarget.of("pvc-1", "n1", setup)


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path.resolve())


def test_the_plugin_s_probe_finds_a_working_sandbox() -> None:
    assert sandbox_problem() is None


@pytest.mark.parametrize("what", ["another base path", "the kubelet's pods", "the plugin's token"])
def test_a_step_finds_nothing_outside_its_base_path_and_writes_in_it(node: Node, what: str) -> None:
    target = node.outside[what]
    script = f'echo mine > "{node.base}/mine" && cat "{target}"'
    step = NodeStep("create", ("/bin/sh", "-c", script), {}, View(read_write=(str(node.base),)))
    result = run_step(step, 10)
    assert not result.ok
    assert "No such file" in result.tail, result.tail
    assert (node.base / "mine").read_text() == "mine\n"
    assert target.read_text() == "not yours\n"


def test_a_step_sees_nothing_of_the_node_s_own_files_and_cannot_mount(node: Node) -> None:
    checks = [
        "test ! -e /etc/hostname",
        "test ! -e /var/lib",
        "test ! -e /root",
        # Its own process namespace: the node's processes are not there to read or signal.
        'test "$(ls /proc | grep -c "^[0-9]")" -lt 10',
        # No CAP_SYS_ADMIN: no mount to widen its view with.
        f'! mount -t tmpfs none "{node.base}" 2>/dev/null',
        f'echo ok > "{node.base}/ok"',
    ]
    step = NodeStep(
        "create", ("/bin/sh", "-c", " && ".join(checks)), {}, View(read_write=(str(node.base),))
    )
    result = run_step(step, 10)
    assert result.ok, result.tail
    assert (node.base / "ok").read_text() == "ok\n"


def test_a_read_only_view_is_read_only(node: Node) -> None:
    view = View(read_only=(str(node.base),))
    step = NodeStep("create", ("/bin/sh", "-c", f'touch "{node.base}/x"'), {}, view)
    result = run_step(step, 10)
    assert not result.ok
    assert "Read-only file system" in result.tail


@pytest.mark.parametrize("path", ["relative", "/dev/null/x"])
def test_a_view_path_not_an_absolute_directory_runs_nothing(path: str) -> None:
    step = NodeStep("create", ("/bin/sh", "-c", "true"), {}, View(read_write=(path,)))
    result = run_step(step, 10)
    assert not result.ok
    assert path in result.tail


def test_a_config_setup_script_makes_chowns_and_chmods_its_directory(node: Node) -> None:
    nobody = pwd.getpwnam("nobody")
    # The config's setup, then a file written as root in a directory it no longer owns.
    script = DEFAULT_SETUP_SCRIPT + 'echo ready > "$VOL_DIR/.ready"\n'
    target = node.target("nobody", "nogroup", "0750")
    results = run_steps(node_steps("create", target, node.bundle(script)), 30)
    assert [r.ok for r in results] == [True, True], results[-1].tail
    made = Path(target.path).stat()
    assert (made.st_uid, made.st_gid) == (nobody.pw_uid, nobody.pw_gid)
    assert made.st_mode & 0o7777 == 0o750
    assert (Path(target.path) / ".ready").read_text() == "ready\n"


def test_a_step_past_its_deadline_is_killed_with_all_it_started(node: Node) -> None:
    late = node.base / "late"
    script = f'(sleep 3; echo survived > "{late}") & sleep 30'
    step = NodeStep("create", ("/bin/sh", "-c", script), {}, View(read_write=(str(node.base),)))
    started = time.monotonic()
    result = run_step(step, 1)
    assert not result.ok
    assert "killed after 1s" in result.tail
    assert time.monotonic() - started < 10
    time.sleep(4)
    assert not late.exists(), "a child of the step outlived its deadline"
