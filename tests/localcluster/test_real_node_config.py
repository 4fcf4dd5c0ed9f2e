"""The real nodes' configuration files, checked without starting anything: the settings
../shared/guide/real-node.md found this machine to need, and what keeps pods on the machine."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import yaml

from localcluster.binaries import ClusterBinaries
from localcluster.component_args import ClusterLayout, kwok_args
from localcluster.real_node_config import (
    REAL_NODE_LABEL,
    RealNodePlan,
    cni_config,
    containerd_config,
    kubelet_args,
    kubelet_config,
    registry_hosts_files,
)

PLAN = RealNodePlan(2, Path("/tmp/lps-cluster-x"), "/lps-abc-real-2", 40000)


def test_each_node_has_its_own_bridge_addresses_and_directories() -> None:
    other = RealNodePlan(1, Path("/tmp/lps-cluster-x"), "/lps-abc-real-1", 40001)
    assert (PLAN.name, PLAN.bridge, PLAN.node_ip) == ("real-2", "lps-real-2", "10.88.2.1")
    assert other.node_ip != PLAN.node_ip and other.state != PLAN.state
    assert PLAN.disk == Path("/tmp/lps-cluster-x/nodes/real-2")
    assert (PLAN.disk / "opt", Path("/opt")) in PLAN.disk_mounts()


def test_containerd_clamps_oom_score_adj_and_reads_the_registry_hosts() -> None:
    config = tomllib.loads(containerd_config(PLAN, Path("/usr/sbin/runc"), Path("/usr/lib/cni")))
    runtime = config["plugins"]["io.containerd.cri.v1.runtime"]
    assert runtime["restrict_oom_score_adj"] is True
    assert runtime["containerd"]["runtimes"]["runc"]["options"]["BinaryName"] == "/usr/sbin/runc"
    images = config["plugins"]["io.containerd.cri.v1.images"]
    assert images["registry"]["config_path"] == str(PLAN.registry_hosts)
    assert images["pinned_images"]["sandbox"] == "registry.k8s.io/pause:3.10"
    assert config["grpc"]["address"] == str(PLAN.containerd_socket)


def test_every_registry_name_resolves_to_the_local_registry_only() -> None:
    files = registry_hosts_files(PLAN, "127.0.0.1:5999")
    names = {path.parent.name for path in files}
    assert names == {"docker.io", "registry.k8s.io", "127.0.0.1:5999"}
    for text in files.values():
        hosts = tomllib.loads(text)
        assert hosts["server"] == "http://127.0.0.1:5999"  # no fallback to the internet
        assert list(hosts["host"]) == ["http://127.0.0.1:5999"]


def test_pods_get_only_a_route_to_the_service_range_and_no_masquerade() -> None:
    bridge = json.loads(cni_config(PLAN))["plugins"][0]
    assert bridge["bridge"] == "lps-real-2"
    assert bridge["isGateway"] is False and bridge["ipMasq"] is False
    assert bridge["ipam"]["routes"] == [{"dst": "10.96.0.0/12", "gw": "10.88.2.1"}]
    assert bridge["ipam"]["ranges"][0][0]["subnet"] == "10.88.2.0/24"


def test_kubelet_settings_this_machine_needs() -> None:
    config = yaml.safe_load(
        kubelet_config(PLAN, Path("/pki/ca.crt"), (Path("/s.crt"), Path("/s.key")))
    )
    assert config["cgroupDriver"] == "cgroupfs"
    assert config["failCgroupV1"] is False and config["failSwapOn"] is False
    assert config["makeIPTablesUtilChains"] is False
    assert config["cgroupRoot"] == "/lps-abc-real-2"
    assert config["podLogsDir"] == str(PLAN.state / "pod-logs")
    assert config["address"] == "10.88.2.1"
    assert config["volumeStatsAggPeriod"] == "5s"
    assert config["featureGates"] == {"CSIVolumeHealth": True}
    arguments = kubelet_args(Path("/bin/kubelet"), PLAN)
    assert "--node-ip=10.88.2.1" in arguments
    assert "--hostname-override=real-2" in arguments
    assert f"--node-labels={REAL_NODE_LABEL}=true" in arguments


def test_kwok_keeps_off_real_nodes_only_when_there_are_some() -> None:
    binaries = ClusterBinaries(*(Path(f"/bin/{n}") for n in "abcde"))
    layout = ClusterLayout(Path("/tmp/c"))
    assert "--manage-all-nodes=true" in kwok_args(binaries, layout)
    beside_real = kwok_args(binaries, layout, fake_nodes_only=True)
    assert "--manage-all-nodes=true" not in beside_real
    assert "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake" in beside_real
