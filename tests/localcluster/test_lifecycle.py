"""Starting and stopping clusters: nothing left running, one-line failures, the CLI."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import psutil
import pytest

from localcluster import (
    ClusterOptions,
    ComponentFailedError,
    LocalCluster,
    NodeSpec,
    RestartBackoff,
)
from localcluster.raw_api import call_json
from localcluster.state_file import read_state, state_path
from tests.localcluster.image_pods import IMAGE, container_status, host_images, is_ready, pod
from tests.localcluster.pods import helper_pod

pytestmark = pytest.mark.cluster

REPOSITORY = Path(__file__).resolve().parents[2]


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_stopped_cluster_leaves_no_process_and_no_directory(tmp_path: Path) -> None:
    options = ClusterOptions(nodes=(NodeSpec("solo", {"zone": "a"}),), parent_dir=tmp_path)
    with LocalCluster.start(options) as cluster:
        assert cluster.startup_seconds < 60
        cluster.create_namespace("work")
        cluster.create_pod("work", helper_pod("sleeper", "solo", "sleep 300"))
        cluster.wait_for_pod_phase("work", "sleeper", ("Running",))
        cluster.restart_apiserver()
        assert "apiserver_request_total" in cluster.apiserver_metrics()
        node = call_json(cluster.core_v1().read_node, "solo")
        assert node["metadata"]["labels"]["zone"] == "a"
        pids = cluster.pids()
        assert len(pids) >= 6  # five components (the apiserver twice) and the helper sandbox
        assert all(_alive(pid) for pid in cluster.control_plane.pids())
        assert cluster.snapshots is None  # not asked for: no snapshot controller, no CRDs
        directory = cluster.dir
    assert [pid for pid in pids if _alive(pid)] == []
    assert not directory.exists()


def test_a_component_that_is_not_ready_fails_in_one_line_and_cleans_up(tmp_path: Path) -> None:
    with pytest.raises(ComponentFailedError) as raised:
        LocalCluster.start(ClusterOptions(parent_dir=tmp_path, startup_timeout_seconds=0.5))
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"localcluster: {raised.value.component} ")
    assert raised.value.log_path.is_file()
    (cluster_dir,) = tmp_path.iterdir()
    assert [child.name for child in cluster_dir.iterdir()] == ["logs"]
    started = [
        p
        for p in psutil.process_iter(["cmdline"])
        if str(cluster_dir) in " ".join(p.info["cmdline"] or [])
    ]
    assert started == []


def test_command_line_start_status_stop(tmp_path: Path) -> None:
    name = f"test-{uuid.uuid4().hex[:8]}"

    def cli(*arguments: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "localcluster", *arguments, "--name", name],
            cwd=REPOSITORY,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    started = cli("start", "--nodes", "1")
    try:
        assert started.returncode == 0, started.stderr + started.stdout
        assert "cluster ready in" in started.stdout
        state = read_state(name)
        assert state is not None and state.nodes == ["node-1"]
        status = cli("status")
        assert status.returncode == 0 and "kube-apiserver" in status.stdout
    finally:
        stopped = cli("stop")
    assert stopped.returncode == 0, stopped.stderr
    assert not state_path(name).exists()
    pids = [state.supervisor.pid] + [component.pid for component in state.components]
    assert [pid for pid in pids if _alive(pid)] == []
    assert not Path(state.cluster_dir).exists()
    assert cli("status").returncode == 1


def test_image_table_pods_restart_with_the_configured_back_off_and_die_with_the_cluster(
    tmp_path: Path,
) -> None:
    options = ClusterOptions(
        nodes=(NodeSpec("solo"),),
        parent_dir=tmp_path,
        restart_backoff=RestartBackoff(initial_seconds=0.2, max_seconds=0.4),
        announce=False,
        images=host_images(),
    )
    with LocalCluster.start(options) as cluster:
        cluster.create_namespace("work")
        crash = {"name": "crash", "image": IMAGE, "command": ["sh", "-c", "exit 7"]}
        cluster.create_pod("work", pod("crash", {"containers": [crash]}))
        sleeper = {"name": "sleep", "image": IMAGE, "command": ["sleep", "300"]}
        cluster.create_pod("work", pod("sleeper", {"containers": [sleeper]}))
        cluster.wait_for_pod("work", "sleeper", is_ready, description="Ready")
        crashed = cluster.wait_for_pod(
            "work",
            "crash",
            lambda found: container_status(found).get("restartCount", 0) >= 4,
            timeout=30,
            description="four restarts (the back-off is 0.2 s to 0.4 s)",
        )
        assert container_status(crashed)["lastState"]["terminated"]["exitCode"] == 7
        pids = cluster.pids()
        image_pids = list(cluster.image_runner.started_pids)
        assert any(_alive(pid) for pid in image_pids), "the sleeper and both pause processes"
    assert [pid for pid in pids if _alive(pid)] == []
