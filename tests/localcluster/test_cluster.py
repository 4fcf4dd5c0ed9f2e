"""The harness against its own real cluster: control-plane behaviour and real helper pods."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from localcluster import NEVER_STARTS_IMAGE, LocalCluster, wait_for
from localcluster.raw_api import call_json
from tests.localcluster.pods import helper_pod, ordinary_pod, terminated_state

pytestmark = pytest.mark.cluster

TERMINAL = ("Succeeded", "Failed")


def _claim(
    name: str, class_name: str, volume_name: str | None = None
) -> client.V1PersistentVolumeClaim:
    return client.V1PersistentVolumeClaim(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PersistentVolumeClaimSpec(
            access_modes=["ReadWriteOnce"],
            storage_class_name=class_name,
            volume_name=volume_name,
            resources=client.V1VolumeResourceRequirements(requests={"storage": "1Gi"}),
        ),
    )


def test_static_volume_and_claim_bind(cluster: LocalCluster, cluster_namespace: str) -> None:
    name = f"static-{cluster_namespace}"
    volume = client.V1PersistentVolume(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PersistentVolumeSpec(
            capacity={"storage": "1Gi"},
            access_modes=["ReadWriteOnce"],
            storage_class_name="manual",
            persistent_volume_reclaim_policy="Retain",
            host_path=client.V1HostPathVolumeSource(path="/opt/static"),
        ),
    )
    cluster.core_v1().create_persistent_volume(volume)
    try:
        cluster.core_v1().create_namespaced_persistent_volume_claim(
            cluster_namespace, _claim("claim", "manual")
        )

        core = cluster.core_v1()

        def bound_claim() -> dict[str, Any] | None:
            claim = call_json(
                core.read_namespaced_persistent_volume_claim, "claim", cluster_namespace
            )
            return claim if claim["status"].get("phase") == "Bound" else None

        claim = wait_for(bound_claim, 60, "the claim to bind")
        assert claim["spec"]["volumeName"] == name
        assert call_json(core.read_persistent_volume, name)["status"]["phase"] == "Bound"
    finally:
        cluster.core_v1().delete_persistent_volume(name)


def test_scheduler_selects_a_node_for_a_wait_for_first_consumer_claim(
    cluster: LocalCluster, cluster_namespace: str
) -> None:
    class_name = f"wffc-{cluster_namespace}"
    cluster.storage_v1().create_storage_class(
        client.V1StorageClass(
            metadata=client.V1ObjectMeta(name=class_name),
            provisioner="example.com/dummy",
            volume_binding_mode="WaitForFirstConsumer",
        )
    )
    try:
        core = cluster.core_v1()
        core.create_namespaced_persistent_volume_claim(
            cluster_namespace, _claim("data", class_name)
        )
        cluster.create_pod(cluster_namespace, ordinary_pod("consumer", claim="data"))

        def selected_node() -> str | None:
            claim = call_json(
                core.read_namespaced_persistent_volume_claim, "data", cluster_namespace
            )
            annotations = claim["metadata"].get("annotations") or {}
            node: str | None = annotations.get("volume.kubernetes.io/selected-node")
            return node

        node = wait_for(selected_node, 60, "volume.kubernetes.io/selected-node")
        assert node in cluster.nodes
    finally:
        cluster.storage_v1().delete_storage_class(class_name)


def test_ordinary_pods_run_on_kwok_nodes(cluster: LocalCluster, cluster_namespace: str) -> None:
    cluster.create_pod(cluster_namespace, ordinary_pod("plain"))
    pod = cluster.wait_for_pod_phase(cluster_namespace, "plain", ("Running",))
    assert pod["spec"]["nodeName"] in cluster.nodes


def test_helper_pod_creates_the_directory_on_its_node_only(
    cluster: LocalCluster, cluster_namespace: str
) -> None:
    second = cluster.nodes[1]
    pod = helper_pod(
        "mkdir", second, 'mkdir -p "$VOL_DIR"', env={"VOL_DIR": f"/opt/lps/{cluster_namespace}"}
    )
    cluster.create_pod(cluster_namespace, pod)
    done = cluster.wait_for_pod_phase(cluster_namespace, "mkdir", TERMINAL)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert terminated_state(done)["exitCode"] == 0
    for node in cluster.nodes:
        created = (cluster.node_dir(node) / "opt" / "lps" / cluster_namespace).is_dir()
        assert created == (node == second), node


def test_failed_helper_reports_exit_code_and_output(
    cluster: LocalCluster, cluster_namespace: str
) -> None:
    pod = helper_pod("fails", cluster.nodes[0], "echo about to fail; echo bad news >&2; exit 3")
    cluster.create_pod(cluster_namespace, pod)
    done = cluster.wait_for_pod_phase(cluster_namespace, "fails", TERMINAL)
    terminated = terminated_state(done)
    assert done["status"]["phase"] == "Failed"
    assert (terminated["exitCode"], terminated["reason"]) == (3, "Error")
    assert terminated["message"] == "about to fail\nbad news\n"
    log = cluster.pod_log_path(cluster_namespace, "fails", done["metadata"]["uid"])
    assert log.read_text() == "about to fail\nbad news\n"


def test_helper_config_map_volume_is_materialised(
    cluster: LocalCluster, cluster_namespace: str
) -> None:
    cluster.core_v1().create_namespaced_config_map(
        cluster_namespace,
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="scripts"),
            data={"setup": "echo from-config-map", "unused": "x"},
        ),
    )
    pod = helper_pod(
        "configured",
        cluster.nodes[0],
        'sh /script/run && test ! -e /script/unused && stat -c %a /script/run > "/opt/lps/$NS"',
        env={"NS": cluster_namespace},
        extra_volumes=[
            {
                "name": "script",
                "configMap": {
                    "name": "scripts",
                    "items": [{"key": "setup", "path": "run", "mode": 0o700}],
                },
            }
        ],
        extra_mounts=[{"name": "script", "mountPath": "/script"}],
    )
    cluster.create_pod(cluster_namespace, pod)
    done = cluster.wait_for_pod_phase(cluster_namespace, "configured", TERMINAL)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    mode_file = cluster.node_dir(cluster.nodes[0]) / "opt" / "lps" / cluster_namespace
    assert mode_file.read_text().strip() == "700"
    log = cluster.pod_log_path(cluster_namespace, "configured", done["metadata"]["uid"])
    assert log.read_text() == "from-config-map\n"


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_deleting_a_running_helper_kills_it_and_removes_the_pod(
    cluster: LocalCluster, cluster_namespace: str
) -> None:
    core = cluster.core_v1()
    node = cluster.nodes[0]
    pid_file = f"/opt/lps/{cluster_namespace}/sleeper.pid"
    # `$$$$`: Kubernetes expands `$$` in a command to `$`, so the shell sees `$$`, its PID.
    script = f'mkdir -p "$(dirname {pid_file})"; echo $$$$ > {pid_file}; exec sleep 300'
    cluster.create_pod(cluster_namespace, helper_pod("sleeper", node, script))
    cluster.wait_for_pod_phase(cluster_namespace, "sleeper", ("Running",))
    on_disk = cluster.node_dir(node) / pid_file.lstrip("/")
    pid = int(wait_for(lambda: on_disk.read_text() if on_disk.exists() else None, 30, "pid"))
    assert Path(f"/proc/{pid}").exists()  # the sandbox shares the host's PID namespace
    core.delete_namespaced_pod("sleeper", cluster_namespace)
    wait_for(
        lambda: True if cluster.read_pod(cluster_namespace, "sleeper") is None else None,
        30,
        "the pod to be gone",
    )
    # Killed is enough: a zombie not yet reaped by its parent is dead (state Z in /proc).
    assert not alive(pid), f"the container's process {pid} outlived its pod"


def test_the_container_hostname_is_the_pod_name(
    cluster: LocalCluster, cluster_namespace: str
) -> None:
    pod = helper_pod("named-host", cluster.nodes[0], 'hostname; echo "$HOSTNAME"')
    cluster.create_pod(cluster_namespace, pod)
    done = cluster.wait_for_pod_phase(cluster_namespace, "named-host", TERMINAL)
    log = cluster.pod_log_path(cluster_namespace, "named-host", done["metadata"]["uid"])
    assert log.read_text() == "named-host\nnamed-host\n"
    assert socket.gethostname() != "named-host"  # the harness's own hostname is untouched


def test_active_deadline_fails_the_helper(cluster: LocalCluster, cluster_namespace: str) -> None:
    pod = helper_pod("slow", cluster.nodes[0], "sleep 300", active_deadline_seconds=1)
    cluster.create_pod(cluster_namespace, pod)
    done = cluster.wait_for_pod_phase(cluster_namespace, "slow", TERMINAL)
    assert (done["status"]["phase"], done["status"]["reason"]) == ("Failed", "DeadlineExceeded")
    assert terminated_state(done)["exitCode"] == 137


def test_never_starting_image_stays_pending_in_image_pull_back_off(
    cluster: LocalCluster, cluster_namespace: str
) -> None:
    pod = helper_pod("stuck", cluster.nodes[0], "true", image=NEVER_STARTS_IMAGE)
    cluster.create_pod(cluster_namespace, pod)

    def waiting_reason(found: dict[str, Any]) -> bool:
        statuses = found.get("status", {}).get("containerStatuses") or [{}]
        waiting = statuses[0].get("state", {}).get("waiting", {})
        return bool(waiting.get("reason") == "ImagePullBackOff")

    stuck = cluster.wait_for_pod(cluster_namespace, "stuck", waiting_reason)
    assert stuck["status"]["phase"] == "Pending"


def test_helper_on_a_missing_node_stays_pending_until_the_node_exists(
    cluster: LocalCluster, cluster_namespace: str
) -> None:
    node = f"late-{cluster_namespace}"
    core = cluster.core_v1()
    cluster.create_pod(cluster_namespace, helper_pod("waits", node, "true"))
    time.sleep(3)  # longer than the runner's resync: it has looked at the pod and left it
    pod = cluster.read_pod(cluster_namespace, "waits")
    assert pod is not None and pod["status"]["phase"] == "Pending"
    cluster.add_node(node, {"example.com/disk": "late"})
    try:
        labels = call_json(core.read_node, node)["metadata"]["labels"]
        assert labels["example.com/disk"] == "late"
        done = cluster.wait_for_pod_phase(cluster_namespace, "waits", TERMINAL)
        assert done["status"]["phase"] == "Succeeded"
    finally:
        cluster.delete_node(node)
    assert node not in cluster.nodes


def test_rbac_is_enforced_for_service_accounts(
    cluster: LocalCluster, cluster_namespace: str
) -> None:
    cluster.core_v1().create_namespaced_service_account(
        cluster_namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="nobody"))
    )
    token = cluster.service_account_token(cluster_namespace, "nobody")
    user = f"system:serviceaccount:{cluster_namespace}:nobody"
    from_token = cluster.client_for_token(token)
    kubeconfig = cluster.service_account_kubeconfig(cluster_namespace, "nobody")
    from_kubeconfig = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
    try:
        for api in (from_token, from_kubeconfig):
            with pytest.raises(ApiException) as denied:
                client.CoreV1Api(api).list_persistent_volume()
            assert denied.value.status == 403
            assert user in str(denied.value.body)
    finally:
        from_token.close()  # type: ignore[no-untyped-call]
        from_kubeconfig.close()


def test_helper_honours_working_dir_args_and_variable_expansion(
    cluster: LocalCluster, cluster_namespace: str
) -> None:
    pod = helper_pod("wd", cluster.nodes[2], "", env={"OUT": f"/opt/lps/{cluster_namespace}.pwd"})
    container = pod["spec"]["containers"][0]
    container["command"] = ["sh", "-c"]
    container["args"] = ['pwd > "$(OUT)"']
    container["workingDir"] = "/opt/lps/work"
    cluster.create_pod(cluster_namespace, pod)
    done = cluster.wait_for_pod_phase(cluster_namespace, "wd", TERMINAL)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    written = cluster.node_dir(cluster.nodes[2]) / "opt" / "lps" / f"{cluster_namespace}.pwd"
    assert written.read_text() == "/opt/lps/work\n"
