"""The batch helper pod (several volumes of one node in one pod) and its two scripts, the
per-volume wrapper and the finish loop, run by /bin/sh on real directories."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from localcluster.pod_env import pod_field
from provisioner.capacity.quota import QUOTA_SCRIPT, project_id_for
from provisioner.configuration.config import (
    DEFAULT_HELPER_POD_YAML,
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
    load_config_bundle,
)
from provisioner.helper_pods.batch_outcomes import VolumeOutcome, batch_outcomes
from provisioner.helper_pods.batch_pod_shapes import (
    BATCH_FINISH_SCRIPT,
    BATCH_VOLUMES_ANNOTATION,
    BATCHABLE_PATH_BYTES,
    DEADLINE_SLACK_SECONDS,
    EXIT_PREFIX,
    MAX_BATCH_VOLUMES,
    OUTCOME_PATH,
    RESULT_DIR,
    RESULTS_DIR,
    SCRIPT_ANNOTATION_PREFIX,
    SCRIPTS_DIR,
    TIMED_OUT_EXIT_CODE,
    VOLUME_WRAPPER,
    batch_pod_name,
    batch_volume_names,
    build_batch_helper_pod,
    is_batchable,
    message_bytes,
    tail_bytes,
)
from provisioner.helper_pods.pod_shapes import (
    BASE_VIEW,
    FINISH_SCRIPT,
    GUARD_SCRIPT,
    HELPER_POD_LABEL,
)
from provisioner.provisioning.volume_decisions import TeardownPlan
from tests.provisioner.removal_permits import permits_for

BUNDLE = load_config_bundle(
    '{"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES",'
    ' "paths": [{"path": "/opt/a", "create": true}, {"path": "/opt/b", "create": true}]}],'
    ' "cmdTimeoutSeconds": 90}',
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
    DEFAULT_HELPER_POD_YAML,
)


def target(number: int, base: str = "/opt/a", node: str | None = "node-1") -> TeardownPlan:
    return TeardownPlan(
        volume_name=f"pvc-{number}",
        path=f"{base}/pvc-{number}_ns_claim-{number}",
        node_name=node,
        volume_mode="Filesystem",
        size_bytes=1024 * number,
        delete_volume=True,
        remove_finalizer=True,
        base_path=base,
    )


TARGETS = [target(1), target(2, "/opt/b"), target(3)]


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"]}


def staged_scripts(pod: dict[str, Any]) -> dict[str, str]:
    """The files a kubelet writes into a batch pod's scripts volume, by name: each item's
    field of the pod, resolved as the harness's kubelet resolves it."""
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "scripts")
    return {
        item["path"]: pod_field(pod, item["fieldRef"]["fieldPath"])
        for item in volume["downwardAPI"]["items"]
    }


def test_each_volume_gets_its_own_init_container_with_its_own_mounts_and_environment() -> None:
    pod = build_batch_helper_pod(
        "create", TARGETS, BUNDLE, "lps", "helper-sa", permits=permits_for(TARGETS)
    )
    spec = pod["spec"]
    names = ["pvc-1", "pvc-2", "pvc-3"]
    assert pod["metadata"]["name"] == batch_pod_name("create", names)
    assert pod["metadata"]["labels"][HELPER_POD_LABEL] == "true"
    assert batch_volume_names(pod) == names
    assert pod["metadata"]["annotations"][BATCH_VOLUMES_ANNOTATION] == '["pvc-1", "pvc-2", "pvc-3"]'
    assert spec["nodeName"] == "node-1"
    assert spec["activeDeadlineSeconds"] == 3 * 90 + DEADLINE_SLACK_SECONDS
    assert spec["volumes"] == [
        {"name": "base-0", "hostPath": {"path": "/opt/a", "type": "DirectoryOrCreate"}},
        {"name": "base-1", "hostPath": {"path": "/opt/b", "type": "DirectoryOrCreate"}},
        *(
            {"name": f"data-{i}", "hostPath": {"path": t.path, "type": "DirectoryOrCreate"}}
            for i, t in enumerate(TARGETS)
        ),
        {"name": "results", "emptyDir": {}},
        {
            "name": "scripts",
            "downwardAPI": {
                "items": [
                    {
                        "path": name,
                        "fieldRef": {
                            "fieldPath": f"metadata.annotations['{SCRIPT_ANNOTATION_PREFIX}{name}']"
                        },
                    }
                    for name in ("batch-finish", "finish", "guard", "quota", "script", "wrapper")
                ]
            },
        },
    ]
    inits = spec["initContainers"]
    assert [c["name"] for c in inits] == ["setup-0", "setup-1", "setup-2"]
    # The scripts every volume runs, once, in the pod's annotations: a kubelet writes them
    # into the scripts volume before any container starts, and every container reads them
    # there read-only; no container of the pod can change what the next one runs.
    assert staged_scripts(pod) == {
        "guard": GUARD_SCRIPT,
        "script": DEFAULT_SETUP_SCRIPT,
        "quota": QUOTA_SCRIPT,
        "wrapper": VOLUME_WRAPPER,
        "finish": FINISH_SCRIPT,
        "batch-finish": BATCH_FINISH_SCRIPT,
    }
    for index, (container, plan) in enumerate(zip(inits, TARGETS, strict=True)):
        base_volume = "base-1" if plan.base_path == "/opt/b" else "base-0"
        # Only its own directory writable, the base path read-only (for the guard), and only
        # its own result directory.
        assert container["volumeMounts"] == [
            {"name": base_volume, "mountPath": BASE_VIEW, "readOnly": True},
            {"name": f"data-{index}", "mountPath": plan.path},
            {"name": "results", "mountPath": RESULT_DIR, "subPath": f"v{index}"},
            {"name": "scripts", "mountPath": SCRIPTS_DIR, "readOnly": True},
        ]
        env = env_of(container)
        assert env["VOL_DIR"] == plan.path
        assert env["VOL_SIZE_BYTES"] == str(plan.size_bytes)
        assert env["LPS_BASE"] == plan.base_path
        assert "LPS_SCRIPT" not in env and "LPS_QUOTA_SCRIPT" not in env, "staged"
        assert env["LPS_PROJECT_ID"] == str(project_id_for(plan.volume_name))
        assert env["LPS_SIZE"] == str(plan.size_bytes)
        assert env["LPS_VOLUME_TIMEOUT"] == "90"
        assert env["LPS_MESSAGE"] == OUTCOME_PATH == container["terminationMessagePath"]
        assert container["command"] == ["/bin/sh", f"{SCRIPTS_DIR}/wrapper", "setup"]
        assert container["args"] == [
            "-p",
            plan.path,
            "-s",
            str(plan.size_bytes),
            "-m",
            "Filesystem",
            "-a",
            "create",
        ]
        assert container["image"] == "busybox:1.37.0"
    finish = spec["containers"][0]
    assert finish["name"] == "finish"
    assert finish["volumeMounts"] == [
        {"name": "base-0", "mountPath": "/opt/a"},
        {"name": "base-1", "mountPath": "/opt/b"},
        {"name": "results", "mountPath": RESULTS_DIR, "readOnly": True},
        {"name": "scripts", "mountPath": SCRIPTS_DIR, "readOnly": True},
    ]
    env = env_of(finish)
    assert env["LPS_ACTION"] == "create"
    assert env["LPS_COUNT"] == "3"
    assert [env[f"LPS_DIR_{i}"] for i in range(3)] == [t.path for t in TARGETS]
    # Each volume's owner check, from its removal permit (a clean-up: made by it, or no
    # marker for a directory named for it).
    assert [env[f"LPS_OWNER_{i}"] for i in range(3)] == [t.volume_name for t in TARGETS]
    assert [env[f"LPS_BASE_{i}"] for i in range(3)] == [t.base_path for t in TARGETS]
    assert finish["command"] == ["/bin/sh", f"{SCRIPTS_DIR}/batch-finish"]


def test_a_teardown_batch_runs_the_teardown_script_in_each_volume_container() -> None:
    pod = build_batch_helper_pod(
        "delete", TARGETS[:2], BUNDLE, "lps", "helper-sa", permits=permits_for(TARGETS[:2])
    )
    inits = pod["spec"]["initContainers"]
    assert [c["name"] for c in inits] == ["teardown-0", "teardown-1"]
    assert staged_scripts(pod)["script"] == DEFAULT_TEARDOWN_SCRIPT
    assert "quota" not in staged_scripts(pod)
    items = pod["spec"]["volumes"][-1]["downwardAPI"]["items"]
    assert [item["path"] for item in items] == [
        "batch-finish",
        "finish",
        "guard",
        "script",
        "wrapper",
    ]
    assert all(c["command"][2] == "teardown" for c in inits)
    assert env_of(pod["spec"]["containers"][0])["LPS_ACTION"] == "delete"
    assert pod["metadata"]["labels"]["local-path-storage.io/helper-action"] == "delete"


def test_the_pod_name_is_the_batch_s_own() -> None:
    assert batch_pod_name("create", ["pvc-1", "pvc-2"]) == batch_pod_name(
        "create", ["pvc-1", "pvc-2"]
    )
    assert batch_pod_name("create", ["pvc-1", "pvc-2"]) != batch_pod_name("create", ["pvc-1"])
    assert batch_pod_name("create", ["pvc-1"]) != batch_pod_name("delete", ["pvc-1"])
    assert len(batch_pod_name("delete", [f"pvc-{n}" for n in range(32)])) <= 63


def test_messages_are_sized_to_the_kubelet_s_share_of_each_container() -> None:
    assert message_bytes(1) == 4096, "what a kubelet reads of a file"
    assert message_bytes(13) == 945, "12 KiB split over 12 volumes and the finish"
    assert message_bytes(MAX_BATCH_VOLUMES + 1) == 189
    assert tail_bytes(4096) == 2048
    assert tail_bytes(945) == 945 - 16


def kubelet_kept(pod: dict[str, Any], written: bytes) -> str:
    """What a kubelet reports of a termination-message file the container wrote: the file's
    last 4096 bytes, then the first 12 KiB / (the pod's containers) of that."""
    spec = pod["spec"]
    share = 12 * 1024 // (len(spec["initContainers"]) + len(spec["containers"]))
    return written[-4096:][:share].decode("utf-8", "replace")


@pytest.mark.parametrize("count", [2, 12, MAX_BATCH_VOLUMES])
def test_every_container_s_message_fits_its_share_at_any_batch_size(count: int) -> None:
    targets = [target(n) for n in range(count)]
    pod = build_batch_helper_pod(
        "delete", targets, BUNDLE, "lps", "helper", permits=permits_for(targets)
    )
    spec = pod["spec"]
    share = 12 * 1024 // (len(spec["initContainers"]) + len(spec["containers"]))
    for container in spec["initContainers"]:
        assert len(f"{EXIT_PREFIX}255\n") + int(env_of(container)["LPS_TAIL_BYTES"]) <= share
    finish = env_of(spec["containers"][0])
    assert int(finish["LPS_MESSAGE_BYTES"]) <= share
    assert len("lps-finish \n") + count <= share, "the outcome line fits"


def test_a_batch_larger_than_the_kubelet_s_messages_can_report_is_refused() -> None:
    targets = [target(n) for n in range(MAX_BATCH_VOLUMES + 1)]
    with pytest.raises(ValueError, match="at most 64 volumes"):
        build_batch_helper_pod(
            "delete", targets, BUNDLE, "lps", "helper", permits=permits_for(targets)
        )


def test_only_volumes_whose_own_pod_runs_the_guarded_script_in_one_step_are_batched() -> None:
    assert is_batchable("create", target(1), BUNDLE)
    assert is_batchable("delete", target(1), BUNDLE)
    nested = dataclasses.replace(target(1), path="/opt/a/ns/claim")
    assert not is_batchable("create", nested, BUNDLE), "its parents need `prepare` first"
    assert is_batchable("delete", nested, BUNDLE)
    custom = dataclasses.replace(
        BUNDLE, config=BUNDLE.config.model_copy(update={"setup_command": "/bin/setup"})
    )
    assert not is_batchable("create", target(1), custom), "the image may have no shell"
    assert is_batchable("delete", target(1), custom)
    outside = dataclasses.replace(target(1), path="/elsewhere/pvc-1")
    assert not is_batchable("delete", outside, BUNDLE)


def test_a_long_path_gets_a_pod_of_its_own() -> None:
    """A batch pod holds each path five times: 64 paths of the longest a node holds would
    come near what an object may have in etcd, and the pod, every volume in it, would not be
    created."""
    folders = "/".join("d" * 99 for _ in range(20))
    at_limit = dataclasses.replace(target(1), path=f"/opt/a/{folders}"[:BATCHABLE_PATH_BYTES])
    assert len(at_limit.path) == BATCHABLE_PATH_BYTES
    assert is_batchable("delete", at_limit, BUNDLE)
    longer = dataclasses.replace(at_limit, path=at_limit.path + "e")
    assert not is_batchable("delete", longer, BUNDLE)


def test_a_template_volume_named_as_ours_gives_way_to_the_scripts_volume() -> None:
    template = {
        **BUNDLE.helper_pod_template,
        "spec": {
            **BUNDLE.helper_pod_template["spec"],
            "volumes": [{"name": "scripts", "emptyDir": {}}, {"name": "extra", "emptyDir": {}}],
        },
    }
    bundle = dataclasses.replace(BUNDLE, helper_pod_template=template)
    pod = build_batch_helper_pod(
        "create", TARGETS, bundle, "lps", "helper", permits=permits_for(TARGETS)
    )
    volumes = pod["spec"]["volumes"]
    assert [v["name"] for v in volumes].count("scripts") == 1
    assert "downwardAPI" in next(v for v in volumes if v["name"] == "scripts")
    assert any(v["name"] == "extra" for v in volumes), "the template's other volumes stay"


@pytest.mark.parametrize(
    ("targets", "problem"),
    [
        ([target(1)], "at least two"),
        ([target(1), target(2, node="node-2")], "one node"),
        ([target(1), target(1)], "each volume once"),
        ([target(1), dataclasses.replace(target(2), path="/opt/a/x/y")], "own"),
    ],
)
def test_a_batch_refuses_what_it_cannot_serve(targets: list[TeardownPlan], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        build_batch_helper_pod(
            "create", targets, BUNDLE, "lps", "helper-sa", permits=permits_for(targets)
        )


# -- the scripts, run for real ---------------------------------------------------------------


def stage(tmp_path: Path, **scripts: str) -> Path:
    """The scripts volume of a batch pod as a kubelet writes it (a file per annotated script,
    `scripts` in place of the pod's own): the directory."""
    directory = tmp_path / "scripts"
    directory.mkdir(parents=True)
    pod = build_batch_helper_pod(
        "create", TARGETS, BUNDLE, "lps", "helper", permits=permits_for(TARGETS)
    )
    for name, text in {**staged_scripts(pod), **scripts}.items():
        (directory / name).write_text(text)
    return directory


def run_wrapper(tmp_path: Path, guard: str, *, timeout: int = 30) -> tuple[int, str, str, float]:
    """The wrapper with `guard` staged in place of the guard: its exit code, its termination
    message, the status it recorded, and how long it took."""
    scripts = stage(tmp_path, guard=guard)
    result = tmp_path / "result"
    result.mkdir()
    message = tmp_path / "message"
    env = {
        "PATH": "/usr/bin:/bin",
        "LPS_SCRIPTS": str(scripts),
        "LPS_RESULT_DIR": str(result),
        "LPS_VOLUME_TIMEOUT": str(timeout),
        "LPS_TAIL_BYTES": "40",
        "LPS_MESSAGE": str(message),
    }
    started = time.monotonic()
    process = subprocess.Popen(
        ["/bin/sh", str(scripts / "wrapper"), "setup", "-p", "/x"],
        env=env,
        start_new_session=True,
    )
    try:
        code = process.wait(60)
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # what a container's end does to what it left
    elapsed = time.monotonic() - started
    return code, message.read_text(), (result / "status").read_text().strip(), elapsed


def test_the_wrapper_records_the_script_s_failure_and_lets_the_next_volume_run(
    tmp_path: Path,
) -> None:
    guard = (
        'echo "$0 $* with $LPS_SCRIPT" > "$LPS_RESULT_DIR/seen";'
        ' for i in 1 2 3 4 5 6 7 8; do echo "line $i of the log"; done; exit 3'
    )
    code, message, status, _ = run_wrapper(tmp_path, guard)
    assert code == 0
    assert status == "3"
    first, _, tail = message.partition("\n")
    assert first == f"{EXIT_PREFIX}3"
    assert len(tail.encode()) <= 40
    assert tail.endswith("line 8 of the log\n"), "the tail of its output"
    seen = (tmp_path / "result" / "seen").read_text()
    assert seen == f"setup -p /x with {DEFAULT_SETUP_SCRIPT}", "the guard's $0, args and script"


def test_the_wrapper_reports_a_success(tmp_path: Path) -> None:
    code, message, status, _ = run_wrapper(tmp_path, "echo fine")
    assert (code, status, message) == (0, "0", f"{EXIT_PREFIX}0\nfine\n")


def test_a_volume_that_outruns_its_timeout_fails_alone(tmp_path: Path) -> None:
    code, message, status, elapsed = run_wrapper(tmp_path, "echo started; sleep 30", timeout=1)
    assert code == 0
    assert status == str(TIMED_OUT_EXIT_CODE)
    assert message.startswith(f"{EXIT_PREFIX}{TIMED_OUT_EXIT_CODE}\n")
    assert "timed out after 1s" in message
    assert elapsed < 10


def run_finish(
    tmp_path: Path,
    action: str,
    volumes: list[tuple[str | None, list[str]]],
    message_bytes: int = 4096,
) -> tuple[Path, list[Path], list[str]]:
    """The finish loop over volumes given as (recorded status or None, entries left in its
    directory); returns the base path, the directories and the loop's lines."""
    base = tmp_path.resolve() / "base"
    results = tmp_path / "results"
    scripts = stage(tmp_path)
    env = {
        "PATH": "/usr/bin:/bin",
        "LPS_ACTION": action,
        "LPS_COUNT": str(len(volumes)),
        "LPS_RESULTS": str(results),
        "LPS_SCRIPTS": str(scripts),
        "LPS_MESSAGE": str(tmp_path / "message"),
        "LPS_LINE_BYTES": "60",
        "LPS_MESSAGE_BYTES": str(message_bytes),
    }
    directories = []
    for index, (status, entries) in enumerate(volumes):
        directory = base / f"pvc-{index}"
        directory.mkdir(parents=True)
        for entry in entries:
            (directory / entry).write_text("data")
        (results / f"v{index}").mkdir(parents=True)
        if status is not None:
            (results / f"v{index}" / "status").write_text(f"{status}\n")
        env[f"LPS_DIR_{index}"] = str(directory)
        env[f"LPS_BASE_{index}"] = str(base)
        # A teardown's permit for a volume named for itself: its marker, or none.
        env[f"LPS_OWNER_{index}"] = directory.name
        env[f"LPS_ABSENT_OK_{index}"] = "true"
        directories.append(directory)
    done = subprocess.run(
        ["/bin/sh", str(scripts / "batch-finish")],
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    return base, directories, (tmp_path / "message").read_text().splitlines()


def test_finish_removes_only_the_directories_whose_teardown_succeeded(tmp_path: Path) -> None:
    _, directories, lines = run_finish(
        tmp_path, "delete", [("0", []), ("1", []), (None, []), ("0", ["left"])]
    )
    assert [d.exists() for d in directories] == [False, True, True, True]
    assert lines[0] == "lps-finish ossf"
    assert lines[1].startswith("3 1 "), lines[1]
    assert "left 1 entries" in lines[1]
    assert len(lines[1]) <= len("3 1 ") + 60
    assert len(lines) == 2


def test_after_setups_finish_removes_the_directories_a_failed_one_left_empty(
    tmp_path: Path,
) -> None:
    _, directories, lines = run_finish(
        tmp_path, "create", [("0", []), ("3", []), ("124", ["partial"]), (None, [])]
    )
    assert [d.exists() for d in directories] == [True, False, True, True]
    assert lines[0] == "lps-finish sofs"
    assert lines[1].startswith("2 1 ")


def test_teardown_outcomes_survive_the_kubelet_s_cuts_at_the_largest_batch(
    tmp_path: Path,
) -> None:
    """The finish script run for real over the largest batch, its message cut as a kubelet
    cuts it (a share of 186 bytes): every volume's outcome is still read right."""
    count = MAX_BATCH_VOLUMES
    targets = [target(n) for n in range(count)]
    pod = build_batch_helper_pod(
        "delete", targets, BUNDLE, "lps", "helper", permits=permits_for(targets)
    )
    share = int(env_of(pod["spec"]["containers"][0])["LPS_MESSAGE_BYTES"])
    volumes: list[tuple[str | None, list[str]]] = [("0", [])] * count
    volumes[7] = ("0", ["left"])  # its finish fails
    volumes[40] = ("2", [])  # its teardown failed: skipped
    run_finish(tmp_path, "delete", volumes, message_bytes=share)
    written = (tmp_path / "message").read_bytes()
    done = {"terminated": {"exitCode": 0, "message": f"{EXIT_PREFIX}0\n"}}
    failed = {"terminated": {"exitCode": 0, "message": f"{EXIT_PREFIX}2\nrm: busy\n"}}
    seen = {
        "status": {
            "initContainerStatuses": [
                {"name": f"teardown-{n}", "state": failed if n == 40 else done}
                for n in range(count)
            ],
            "containerStatuses": [
                {
                    "name": "finish",
                    "state": {"terminated": {"exitCode": 0, "message": kubelet_kept(pod, written)}},
                }
            ],
        }
    }
    names = [t.volume_name for t in targets]
    outcomes = batch_outcomes("delete", seen, names, unfinished="never got there")
    succeeded = [o.volume_name for o in outcomes if o.succeeded]
    assert succeeded == [name for n, name in enumerate(names) if n not in (7, 40)]
    assert outcomes[7].container == "finish" and outcomes[7].exit_code == 1
    assert "left 1 entries" in outcomes[7].message
    assert outcomes[40] == VolumeOutcome("pvc-40", False, "teardown-40", 2, "Error", "rm: busy\n")
