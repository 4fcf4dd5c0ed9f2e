"""Start-up pieces that need no cluster: certificates, stages, arguments, ports, binaries."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID

from localcluster import ClusterOptions, LocalCluster, MissingBinariesError, PortInUseError
from localcluster.binaries import ClusterBinaries, locate_binaries
from localcluster.certificates import generate_pki
from localcluster.cluster_dirs import make_cluster_dir, remove_abandoned_cluster_dirs
from localcluster.component_args import (
    ClusterLayout,
    ClusterPorts,
    apiserver_args,
    controller_manager_args,
    etcd_args,
)
from localcluster.helper_pods import HELPER_POD_LABEL
from localcluster.kwok_stages import stages, write_stages
from localcluster.ports import pick_free_ports


def _certificate(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_pki_has_admin_in_system_masters_and_serves_loopback(tmp_path: Path) -> None:
    pki = generate_pki(tmp_path)
    admin = _certificate(pki.admin.cert)
    organizations = admin.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    assert [attribute.value for attribute in organizations] == ["system:masters"]
    serving = _certificate(pki.apiserver_serving.cert)
    names = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in names.get_values_for_type(x509.DNSName)
    assert "127.0.0.1" in [str(ip) for ip in names.get_values_for_type(x509.IPAddress)]
    ca = _certificate(pki.ca.cert)
    serving.verify_directly_issued_by(ca)
    admin.verify_directly_issued_by(ca)
    assert pki.service_account_private_key.stat().st_mode & 0o077 == 0


def test_every_pod_stage_skips_helper_pods(tmp_path: Path) -> None:
    documents = list(yaml.safe_load_all(write_stages(tmp_path / "stages.yaml").read_text()))
    assert [d["metadata"]["name"] for d in documents] == [s["metadata"]["name"] for s in stages()]
    pod_stages = [d for d in documents if d["spec"]["resourceRef"]["kind"] == "Pod"]
    assert {d["metadata"]["name"] for d in pod_stages} == {"pod-ready", "pod-delete"}
    for stage in pod_stages:
        keys = [e["key"] for e in stage["spec"]["selector"]["matchExpressions"]]
        assert f'.metadata.labels["{HELPER_POD_LABEL}"]' in keys


def test_missing_binaries_name_the_build_command(tmp_path: Path) -> None:
    with pytest.raises(MissingBinariesError) as raised:
        locate_binaries(tmp_path)
    message = str(raised.value)
    assert "scripts/build-go-tools.sh cluster" in message
    assert "\n" not in message


def test_a_port_in_use_fails_with_one_clear_line(tmp_path: Path) -> None:
    (port,) = pick_free_ports(1)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", port))
        holder.listen()
        with pytest.raises(PortInUseError) as raised:
            LocalCluster.start(ClusterOptions(apiserver_port=port, parent_dir=tmp_path))
    assert str(raised.value).startswith(f"localcluster: port 127.0.0.1:{port} for kube-apiserver")
    assert "\n" not in str(raised.value)
    assert list(tmp_path.iterdir()) == []


def test_free_ports_are_distinct() -> None:
    ports = pick_free_ports(5)
    assert len(set(ports)) == 5


def test_only_directories_of_dead_owners_are_removed(tmp_path: Path) -> None:
    dead = make_cluster_dir(tmp_path)
    owner = json.loads((dead / "owner.json").read_text())
    owner["pid"], owner["start_time"] = os.getpid(), 1  # this PID, but not this process
    (dead / "owner.json").write_text(json.dumps(owner))
    mine = make_cluster_dir(tmp_path)
    kept_logs = tmp_path / "lps-cluster-kept"
    (kept_logs / "logs").mkdir(parents=True)
    assert remove_abandoned_cluster_dirs(tmp_path) == [dead]
    assert sorted(tmp_path.iterdir()) == sorted([mine, kept_logs])


def test_component_flags_enforce_rbac_and_issue_service_account_tokens(tmp_path: Path) -> None:
    binaries = ClusterBinaries(*(tmp_path / name for name in ("e", "a", "c", "s", "k")))
    layout = ClusterLayout(tmp_path)
    pki = generate_pki(layout.pki)
    apiserver = apiserver_args(binaries, layout, ClusterPorts(1, 2, 3), pki)
    assert "--authorization-mode=Node,RBAC" in apiserver
    assert f"--service-account-signing-key-file={pki.service_account_private_key}" in apiserver
    assert "--secure-port=3" in apiserver and "--bind-address=127.0.0.1" in apiserver
    controllers = controller_manager_args(binaries, layout, pki)
    assert "--use-service-account-credentials=true" in controllers
    assert f"--root-ca-file={pki.ca.cert}" in controllers
    assert "--unsafe-no-fsync" in etcd_args(binaries, layout, ClusterPorts(1, 2, 3))
