"""The helper runner's decisions on plain data: sandbox plans, environment, statuses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from localcluster import helper_pod_status as status
from localcluster.helper_pods import (
    Mount,
    SubPathError,
    UnsupportedPodError,
    node_host_path,
    plan_sandbox,
    resolve_sub_path,
    termination_message,
)
from localcluster.image_table import ImageRuntime
from localcluster.pod_env import container_environment, expand_variables
from tests.localcluster.pods import helper_pod


def _with_uid(pod: dict[str, Any]) -> dict[str, Any]:
    pod["metadata"]["namespace"] = "ns"
    pod["metadata"]["uid"] = "uid-1"
    return pod


def test_hostpath_lands_in_the_node_directory(tmp_path: Path) -> None:
    pod = _with_uid(helper_pod("p", "node-2", 'mkdir -p "$VOL_DIR"', env={"VOL_DIR": "/opt/lps/x"}))
    plan = plan_sandbox(pod, root=tmp_path / "root", node_dir=tmp_path / "node-2", materialized={})
    assert plan.argv == ["sh", "-c", 'mkdir -p "$VOL_DIR"']
    assert plan.env["VOL_DIR"] == "/opt/lps/x"
    assert [(m.source, m.target) for m in plan.mounts] == [
        (str(tmp_path / "node-2" / "opt" / "lps"), "/opt/lps")
    ]


def test_host_path_cannot_climb_out_of_the_node_directory(tmp_path: Path) -> None:
    assert node_host_path(tmp_path, "/../../etc") == tmp_path / "etc"
    assert node_host_path(tmp_path, "/") == tmp_path
    with pytest.raises(UnsupportedPodError):
        node_host_path(tmp_path, "relative/path")


def test_nested_mounts_are_ordered_parent_first(tmp_path: Path) -> None:
    pod = _with_uid(
        helper_pod(
            "p",
            "node-1",
            "true",
            extra_volumes=[{"name": "script", "configMap": {"name": "c"}}],
            extra_mounts=[{"name": "script", "mountPath": "/opt/lps/script", "readOnly": True}],
        )
    )
    pod["spec"]["containers"][0]["volumeMounts"].reverse()
    plan = plan_sandbox(
        pod, root=tmp_path, node_dir=tmp_path / "n", materialized={"script": tmp_path / "cm"}
    )
    assert [m.target for m in plan.mounts] == ["/opt/lps", "/opt/lps/script"]
    assert plan.mounts[1].read_only


def test_a_sub_path_is_resolved_at_the_start_inside_its_volume_only(tmp_path: Path) -> None:
    """As a kubelet's subpath_linux.go: the subPath's links resolved, the result inside the
    volume or refused, made when missing, and the resolved directory is what is mounted."""
    pod = _with_uid(helper_pod("p", "node-1", "true"))
    pod["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "data", "mountPath": "/v", "subPath": "ns/claim"}
    ]
    pod["spec"]["volumes"] = [{"name": "data", "hostPath": {"path": "/opt/lps"}}]
    plan = plan_sandbox(pod, root=tmp_path / "root", node_dir=tmp_path / "n", materialized={})
    (mount,) = plan.mounts
    volume = tmp_path / "n" / "opt" / "lps"
    assert (mount.source, mount.volume_root) == (str(volume / "ns" / "claim"), str(volume))

    volume.mkdir(parents=True)
    assert resolve_sub_path(mount).source == str(volume / "ns" / "claim")
    assert (volume / "ns" / "claim").is_dir()  # made, as a kubelet makes a missing subPath

    # A link inside the volume is followed; one out of it is refused, never mounted.
    (volume / "other").mkdir()
    (volume / "ns" / "claim").rmdir()
    (volume / "ns" / "claim").symlink_to(volume / "other")
    assert resolve_sub_path(mount).source == str(volume / "other")
    (volume / "ns" / "claim").unlink()
    (volume / "ns" / "claim").symlink_to(tmp_path)
    with pytest.raises(SubPathError, match="not within volume path"):
        resolve_sub_path(mount)
    # Nor made through a link out of the volume.
    (volume / "ns" / "claim").unlink()
    (volume / "ns").rmdir()
    (volume / "ns").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "elsewhere").mkdir()
    with pytest.raises(SubPathError, match="not within volume path"):
        resolve_sub_path(mount)
    assert not (tmp_path / "elsewhere" / "claim").exists()
    # Any other mount is left as it is.
    plain = Mount(source=str(volume), target="/v")
    assert resolve_sub_path(plain) is plain


def test_unsupported_volumes_and_missing_command_are_refused(tmp_path: Path) -> None:
    pod = _with_uid(helper_pod("p", "node-1", "true"))
    pod["spec"]["volumes"][0] = {"name": "data", "persistentVolumeClaim": {"claimName": "c"}}
    with pytest.raises(UnsupportedPodError, match="not emulated"):
        plan_sandbox(pod, root=tmp_path, node_dir=tmp_path, materialized={})
    pod = _with_uid(helper_pod("p", "node-1", "true"))
    del pod["spec"]["containers"][0]["command"]
    with pytest.raises(UnsupportedPodError, match="command"):
        plan_sandbox(pod, root=tmp_path, node_dir=tmp_path, materialized={})


def test_an_image_root_is_the_plans_root_with_no_host_directory_and_its_entrypoint(
    tmp_path: Path,
) -> None:
    pod = _with_uid(helper_pod("p", "node-1", "true"))
    container = pod["spec"]["containers"][0]
    del container["command"]
    container["args"] = ["--workers", "2"]
    image = ImageRuntime(
        root=tmp_path / "rootfs", entrypoint=("provisioner",), working_dir="/home/nonroot"
    )
    plan = plan_sandbox(pod, root=tmp_path, node_dir=tmp_path / "n", materialized={}, image=image)
    assert plan.image_root == str(tmp_path / "rootfs")
    assert plan.argv == ["provisioner", "--workers", "2"]
    assert plan.working_dir == "/home/nonroot"
    assert [m.target for m in plan.mounts] == ["/opt/lps"], "the volume only"


def test_kubernetes_variable_expansion() -> None:
    env = {"A": "1", "B": "two"}
    assert expand_variables("$(A)-$(B)", env) == "1-two"
    assert expand_variables("$$(A) $(MISSING)", env) == "$(A) $(MISSING)"
    container = {"env": [{"name": "X", "value": "a"}, {"name": "Y", "value": "$(X)b"}]}
    environment = container_environment(container, "pod")
    assert environment["Y"] == "ab"
    assert environment["HOSTNAME"] == "pod"
    assert "/usr/bin" in environment["PATH"]


def test_termination_message_keeps_the_last_80_lines_and_2048_bytes() -> None:
    many_lines = b"".join(f"line {i}\n".encode() for i in range(200))
    message = termination_message(many_lines)
    assert message.splitlines()[0] == "line 120"
    assert message.splitlines()[-1] == "line 199"
    long_lines = b"".join(b"x" * 100 + b"\n" for _ in range(50))
    assert len(termination_message(long_lines).encode()) == 2048


def test_failure_message_follows_the_termination_message_policy() -> None:
    fallback = {"terminationMessagePolicy": "FallbackToLogsOnError"}
    assert status.failure_message(fallback, 3, b"oops\n") == "oops\n"
    assert status.failure_message(fallback, 0, b"fine\n") == ""
    assert status.failure_message({"terminationMessagePolicy": "File"}, 3, b"oops\n") == ""


def test_terminated_status_reports_phase_exit_code_and_deadline() -> None:
    pod = _with_uid(helper_pod("p", "node-1", "true"))
    failed = status.terminated_status(
        pod, exit_code=3, reason="Error", message="m", started_at="t0", finished_at="t1"
    )
    assert failed["phase"] == "Failed"
    assert failed["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3
    succeeded = status.terminated_status(
        pod, exit_code=0, reason="Completed", message="", started_at="t0", finished_at="t1"
    )
    assert succeeded["phase"] == "Succeeded"
    assert "message" not in succeeded["containerStatuses"][0]["state"]["terminated"]
    deadline = status.terminated_status(
        pod,
        exit_code=137,
        reason="Error",
        message="",
        started_at="t0",
        finished_at="t1",
        pod_reason="DeadlineExceeded",
        pod_message=status.DEADLINE_EXCEEDED_MESSAGE,
    )
    assert (deadline["phase"], deadline["reason"]) == ("Failed", "DeadlineExceeded")
