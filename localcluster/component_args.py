"""Command lines of the five components, as pure functions of paths and ports.

Why: these flags are the whole "installation" of the local cluster; keeping them in one small,
side-effect-free module makes them easy to review against what envtest and kwokctl pass, and to
test without starting anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from localcluster.binaries import ClusterBinaries
from localcluster.certificates import ClusterPki

SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/12"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
POD_CIDR = "10.0.0.0/16"
NODE_LEASE_SECONDS = 40


@dataclass(frozen=True)
class ClusterPorts:
    """The loopback ports one cluster listens on."""

    etcd_client: int
    etcd_peer: int
    apiserver: int


@dataclass(frozen=True)
class ClusterLayout:
    """Where one cluster keeps its files."""

    root: Path

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def etcd_data(self) -> Path:
        return self.root / "etcd-data"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def nodes(self) -> Path:
        return self.root / "nodes"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    def component_kubeconfig(self, component: str) -> Path:
        return self.root / "kubeconfigs" / f"{component}.kubeconfig"

    @property
    def kwok_stages(self) -> Path:
        return self.root / "kwok-stages.yaml"

    @property
    def apiserver_cert_dir(self) -> Path:
        return self.root / "apiserver-certs"


def etcd_args(binaries: ClusterBinaries, layout: ClusterLayout, ports: ClusterPorts) -> list[str]:
    client_url = f"http://127.0.0.1:{ports.etcd_client}"
    peer_url = f"http://127.0.0.1:{ports.etcd_peer}"
    return [
        str(binaries.etcd),
        "--name=localcluster",
        f"--data-dir={layout.etcd_data}",
        f"--listen-client-urls={client_url}",
        f"--advertise-client-urls={client_url}",
        f"--listen-peer-urls={peer_url}",
        f"--initial-advertise-peer-urls={peer_url}",
        f"--initial-cluster=localcluster={peer_url}",
        "--initial-cluster-state=new",
        "--unsafe-no-fsync",
        "--log-level=warn",
    ]


def apiserver_args(
    binaries: ClusterBinaries, layout: ClusterLayout, ports: ClusterPorts, pki: ClusterPki
) -> list[str]:
    return [
        str(binaries.kube_apiserver),
        f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
        f"--secure-port={ports.apiserver}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--cert-dir={layout.apiserver_cert_dir}",
        f"--tls-cert-file={pki.apiserver_serving.cert}",
        f"--tls-private-key-file={pki.apiserver_serving.key}",
        f"--client-ca-file={pki.ca.cert}",
        # A real node's kubelet accepts only clients its CA signed (pods/log, exec).
        f"--kubelet-client-certificate={pki.apiserver_kubelet_client.cert}",
        f"--kubelet-client-key={pki.apiserver_kubelet_client.key}",
        "--kubelet-preferred-address-types=InternalIP",
        "--authorization-mode=Node,RBAC",
        f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
        f"--service-account-key-file={pki.service_account_public_key}",
        f"--service-account-signing-key-file={pki.service_account_private_key}",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        "--allow-privileged=true",
        "--enable-admission-plugins=NodeRestriction",
        # Without it the API server drops spec.dataSourceRef.namespace, so a claim naming a
        # clone source in another namespace (which the provisioner must refuse) could not be
        # written at all; users who turn it on get that refusal, and the tests prove it.
        "--feature-gates=CrossNamespaceVolumeDataSource=true",
        # The `kubernetes` Service would point at 127.0.0.1, which Endpoints reject (a log
        # line every 10 s); nothing in this cluster reaches the API through that Service.
        "--endpoint-reconciler-type=none",
        "--shutdown-send-retry-after=true",
        "--profiling=false",
    ]


def controller_manager_args(
    binaries: ClusterBinaries, layout: ClusterLayout, pki: ClusterPki
) -> list[str]:
    kubeconfig = layout.component_kubeconfig("kube-controller-manager")
    return [
        str(binaries.kube_controller_manager),
        f"--kubeconfig={kubeconfig}",
        f"--root-ca-file={pki.ca.cert}",
        f"--service-account-private-key-file={pki.service_account_private_key}",
        "--use-service-account-credentials=true",
        "--leader-elect=false",
        "--secure-port=0",
        # Re-check unbound claims every few seconds rather than every 15 s, so tests that
        # need a retry (e.g. a PV created after its claim) do not wait long.
        "--pvclaimbinder-sync-period=5s",
        "--profiling=false",
    ]


def scheduler_args(binaries: ClusterBinaries, layout: ClusterLayout) -> list[str]:
    kubeconfig = layout.component_kubeconfig("kube-scheduler")
    return [
        str(binaries.kube_scheduler),
        f"--kubeconfig={kubeconfig}",
        "--leader-elect=false",
        "--secure-port=0",
        "--profiling=false",
    ]


FAKE_NODE_ANNOTATION = "kwok.x-k8s.io/node=fake"
"""Every node the harness creates for kwok carries it (nodes.node_manifest)."""


def kwok_args(
    binaries: ClusterBinaries, layout: ClusterLayout, fake_nodes_only: bool = False
) -> list[str]:
    # Beside real kubelets, kwok must keep off their nodes (and so off their pods): it then
    # manages only the nodes the harness made for it.
    managed = (
        f"--manage-nodes-with-annotation-selector={FAKE_NODE_ANNOTATION}"
        if fake_nodes_only
        else "--manage-all-nodes=true"
    )
    return [
        str(binaries.kwok),
        f"--kubeconfig={layout.component_kubeconfig('kwok')}",
        f"--config={layout.kwok_stages}",
        managed,
        f"--node-lease-duration-seconds={NODE_LEASE_SECONDS}",
        f"--cidr={POD_CIDR}",
    ]
