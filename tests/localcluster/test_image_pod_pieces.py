"""The image-table runner's decisions on plain data: the table, kwok's selector, the
environment, the security context, back-off, probes, statuses and the atomic volume writer."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from localcluster import container_status as statuses
from localcluster.atomic_writer import DATA_LINK, UnsafeVolumePathError, write_atomically
from localcluster.image_pod_plan import (
    ContainerConfigError,
    RestartBackoff,
    environment_defaults,
    grace_seconds,
    security_settings,
    should_restart,
)
from localcluster.image_table import (
    PROVISIONER_IMAGE_REPOSITORY,
    ImageRuntime,
    ImageTable,
    image_repository,
    outermost,
    python_environment,
)
from localcluster.kwok_stages import IMAGE_REPOSITORY_QUERY, stages
from localcluster.pod_env import container_environment, pod_field
from localcluster.probes import parse_probe


def _pod(image: str = "local-path-storage/provisioner:0.1.0", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "labels": {"app": "x"}},
        "spec": {"containers": [{"name": "c", "image": image}], "nodeName": "node-1", **spec},
        "status": {"podIP": "127.1.0.1", "hostIP": "127.0.0.1"},
    }


@pytest.mark.parametrize(
    ("image", "repository"),
    [
        ("local-path-storage/provisioner:0.1.0", "local-path-storage/provisioner"),
        ("local-path-storage/provisioner", "local-path-storage/provisioner"),
        ("registry:5000/team/tool:v1@sha256:abc", "registry:5000/team/tool"),
        ("registry:5000/team/tool", "registry:5000/team/tool"),
    ],
)
def test_image_repository_drops_tag_and_digest_but_not_a_registry_port(
    image: str, repository: str
) -> None:
    assert image_repository(image) == repository


IMAGE_ROOT = ImageRuntime(
    root=Path("/cache/image-1/rootfs"),
    env={"PATH": "/usr/local/bin:/usr/bin", "HOME": "/home/nonroot", "LANG": "C.UTF-8"},
    user=65532,
    group=65532,
    entrypoint=("local-path-storage-provisioner",),
)


def test_the_provisioner_entry_is_its_image_and_extra_entries_add_to_or_replace_it(
    tmp_path: Path,
) -> None:
    tools = ImageRuntime(path=(tmp_path,), mounts=(tmp_path,))
    table = ImageTable({"example.com/tools": tools}, IMAGE_ROOT)
    assert table.repositories == ["example.com/tools", PROVISIONER_IMAGE_REPOSITORY]
    assert table.runtime_for(_pod()) == IMAGE_ROOT
    assert table.runtime_for(_pod("example.com/tools:2")) == ImageRuntime((tmp_path,), (tmp_path,))
    assert table.runtime_for(_pod("busybox")) is None
    replaced = ImageTable({PROVISIONER_IMAGE_REPOSITORY: tools}, IMAGE_ROOT)
    assert replaced.runtime_for(_pod()) == tools
    assert ImageTable({"example.com/tools": tools}).repositories == ["example.com/tools"]


def test_the_python_environment_entry_is_this_interpreter_and_this_checkout() -> None:
    runtime = python_environment()
    assert runtime.root is None
    assert runtime.path == (Path(sys.prefix) / "bin",)
    mounted = runtime.mounts
    assert any(Path(sys.prefix).resolve().is_relative_to(path) for path in mounted)
    assert any(Path(sys.base_prefix).resolve().is_relative_to(path) for path in mounted)
    checkout = Path(__file__).resolve().parents[2]
    assert any(checkout.is_relative_to(path) for path in mounted), "the editable checkout"
    # This checkout's code first, whichever clone the shared virtualenv's editable install names.
    assert runtime.python_path == (checkout,)


def test_outermost_keeps_only_paths_not_inside_another(tmp_path: Path) -> None:
    inner = tmp_path / "a" / "b"
    inner.mkdir(parents=True)
    assert outermost([inner, tmp_path / "a", tmp_path / "c"]) == (
        (tmp_path / "a").resolve(),
        (tmp_path / "c").resolve(),
    )
    # A venv made from the base installation it sits in is one mount, beside this checkout.
    checkout = Path(__file__).resolve().parents[2]
    assert python_environment(tmp_path, tmp_path).mounts == (checkout, tmp_path.resolve())


def test_every_pod_stage_skips_image_table_pods() -> None:
    for stage in stages(["b/two", "a/one"]):
        if stage["spec"]["resourceRef"]["kind"] != "Pod":
            continue
        expressions = stage["spec"]["selector"]["matchExpressions"]
        skip = [e for e in expressions if e["key"] == IMAGE_REPOSITORY_QUERY]
        assert skip == [
            {"key": IMAGE_REPOSITORY_QUERY, "operator": "NotIn", "values": ["a/one", "b/two"]}
        ], stage["metadata"]["name"]


def test_environment_resolves_field_refs_and_expansion_and_leaves_other_sources_out() -> None:
    pod = _pod()
    container = {
        "env": [
            {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
            {"name": "BOTH", "value": "$(NS)/$(IP)/$(KEY)"},
        ],
    }
    env = container_environment(container, "p", pod=pod, defaults={"PATH": "/x:/usr/bin"})
    assert (env["NS"], env["APP"], env["IP"]) == ("ns", "x", "127.1.0.1")
    assert "KEY" not in env, "a Secret's key is not emulated"
    assert env["BOTH"] == "ns/127.1.0.1/$(KEY)"
    assert env["PATH"] == "/x:/usr/bin"


def test_pod_field_spells_maps_and_lists_as_the_downward_api_does() -> None:
    pod = _pod()
    pod["metadata"]["annotations"] = {"b": "2", "a": "1"}
    assert pod_field(pod, "metadata.annotations") == 'a="1"\nb="2"'
    pod["status"]["podIPs"] = [{"ip": "127.1.0.1"}]
    assert pod_field(pod, "status.podIPs") == "127.1.0.1"
    assert pod_field(pod, "spec.serviceAccountName") == ""


def test_environment_defaults_put_the_image_first_and_point_at_the_relay() -> None:
    defaults = environment_defaults(ImageRuntime(path=(Path("/venv/bin"),)), 6443, 65532)
    assert defaults["PATH"].startswith("/venv/bin:")
    assert defaults["HOME"] == "/"
    assert "PYTHONPATH" not in defaults
    with_code = environment_defaults(ImageRuntime(python_path=(Path("/src"), Path("/lib"))), 1, 0)
    assert with_code["PYTHONPATH"] == "/src:/lib"
    assert defaults["KUBERNETES_SERVICE_HOST"] == "127.0.0.1"
    assert (
        defaults["KUBERNETES_SERVICE_PORT"] == defaults["KUBERNETES_SERVICE_PORT_HTTPS"] == "6443"
    )


def test_an_image_roots_environment_is_its_configs_with_nothing_of_the_host() -> None:
    defaults = environment_defaults(IMAGE_ROOT, 6443, 65532)
    assert defaults["PATH"] == "/usr/local/bin:/usr/bin"
    assert defaults["HOME"] == "/home/nonroot"
    assert defaults["LANG"] == "C.UTF-8"
    assert "PYTHONPATH" not in defaults
    assert defaults["KUBERNETES_SERVICE_HOST"] == "127.0.0.1"


def test_security_context_container_over_pod_and_run_as_non_root() -> None:
    pod = _pod(securityContext={"runAsUser": 1000})
    container = {"securityContext": {"runAsUser": 1001, "readOnlyRootFilesystem": True}}
    settings = security_settings(pod, container)
    assert (settings.user, settings.group) == (1001, 0)
    assert settings.read_only_root
    with pytest.raises(ContainerConfigError, match="runAsNonRoot"):
        security_settings(_pod(securityContext={"runAsNonRoot": True}), {})


def test_the_images_user_applies_unless_the_security_context_names_one() -> None:
    non_root = _pod(securityContext={"runAsNonRoot": True})
    settings = security_settings(non_root, {}, IMAGE_ROOT)
    assert (settings.user, settings.group) == (65532, 65532)
    own_user = security_settings(_pod(securityContext={"runAsUser": 1000}), {}, IMAGE_ROOT)
    assert (own_user.user, own_user.group) == (1000, 0)
    own_group = security_settings(_pod(securityContext={"runAsGroup": 7}), {}, IMAGE_ROOT)
    assert (own_group.user, own_group.group) == (65532, 7)
    with pytest.raises(ContainerConfigError, match="runAsNonRoot"):
        security_settings(non_root, {}, ImageRuntime(root=Path("/r"), user=0))


def test_back_off_restarts_at_once_then_doubles_up_to_the_cap() -> None:
    backoff = RestartBackoff()
    assert [backoff.delay(n) for n in range(1, 8)] == [0, 10, 20, 40, 80, 160, 300]
    assert RestartBackoff(0.5, 2).delay(5) == 2
    assert backoff.expired(601) and not backoff.expired(599)
    assert should_restart("Always", 0) and should_restart("OnFailure", 1)
    assert not should_restart("OnFailure", 0) and not should_restart("Never", 1)


def test_grace_is_the_deletions_then_the_pods() -> None:
    pod = _pod(terminationGracePeriodSeconds=7)
    assert grace_seconds(pod) == 7
    pod["metadata"]["deletionGracePeriodSeconds"] = 2
    assert grace_seconds(pod) == 2
    assert grace_seconds(_pod()) == 30


def test_probes_resolve_named_ports_and_fill_in_defaults() -> None:
    container = {"name": "c", "ports": [{"name": "metrics", "containerPort": 8080}]}
    # As the API server stores it: with `scheme: HTTP` filled in.
    stored = {"httpGet": {"path": "/readyz", "port": "metrics", "scheme": "HTTP"}}
    probe = parse_probe(stored, container)
    assert probe is not None
    assert (probe.port, probe.path) == (8080, "/readyz")
    assert (probe.period_seconds, probe.timeout_seconds, probe.failure_threshold) == (10, 1, 3)
    assert parse_probe(None, container) is None
    with pytest.raises(ValueError, match="names no port"):
        parse_probe({"httpGet": {"port": "other"}}, container)


@pytest.mark.parametrize(
    "probe",
    [
        {"exec": {"command": ["true"]}},
        {"tcpSocket": {"port": 8080}},
        {"httpGet": {"port": 8080, "scheme": "HTTPS"}},
        {"httpGet": {"port": 8080, "httpHeaders": [{"name": "a", "value": "b"}]}},
    ],
)
def test_a_probe_the_deployment_does_not_use_is_refused_not_half_run(probe: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="only plain httpGet probes are emulated"):
        parse_probe(probe, {"name": "c"})


def test_status_keeps_the_schedulers_condition_and_unchanged_transition_times() -> None:
    pod = _pod()
    pod["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "t0"},
        {"type": "Initialized", "status": "True", "lastTransitionTime": "t1"},
        {"type": "Ready", "status": "True", "lastTransitionTime": "t1"},
    ]
    life = statuses.ContainerLife("c", "img", state={"running": {"startedAt": "t1"}})
    status = statuses.pod_status(
        pod,
        life,
        phase="Running",
        now="t2",
        start_time="t1",
        pod_ip="127.1.0.1",
        host_ip="127.0.0.1",
        sandbox_ready=True,
    )
    times = {c["type"]: (c["status"], c["lastTransitionTime"]) for c in status["conditions"]}
    assert times["PodScheduled"] == ("True", "t0")
    assert times["Initialized"] == ("True", "t1")
    assert times["Ready"] == ("False", "t2")
    assert status["podIP"] == "127.1.0.1"
    assert status["containerStatuses"][0]["restartCount"] == 0


def test_the_atomic_writer_swaps_data_and_removes_the_old_version(tmp_path: Path) -> None:
    volume = tmp_path / "config"
    assert write_atomically(volume, [("config.json", b"{}", 0o644), ("dir/x", b"1", 0o600)])
    first = (volume / DATA_LINK).readlink()
    assert (volume / "config.json").readlink() == Path(DATA_LINK) / "config.json"
    assert (volume / "dir" / "x").read_bytes() == b"1"
    assert ((volume / "dir" / "x").stat().st_mode & 0o777) == 0o600
    assert not write_atomically(volume, [("dir/x", b"1", 0o600), ("config.json", b"{}", 0o644)])
    assert write_atomically(volume, [("config.json", b'{"a": 1}', 0o644)])
    second = (volume / DATA_LINK).readlink()
    assert second != first
    assert not (volume / first).exists()
    assert not (volume / "dir").exists(), "a key gone from the ConfigMap is gone from the volume"
    assert sorted(p.name for p in volume.iterdir()) == sorted(
        [DATA_LINK, str(second), "config.json"]
    )
    with pytest.raises(UnsafeVolumePathError):
        write_atomically(volume, [("../escape", b"", 0o644)])
