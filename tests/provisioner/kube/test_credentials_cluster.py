"""Every form of credentials, sent to the real API server: it says who we are (a
SelfSubjectReview), or the TLS handshake refuses the server."""

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from urllib3.exceptions import InsecureRequestWarning, MaxRetryError

from localcluster import LocalCluster
from provisioner.kube.client import KubeClients, KubeConfigError, create_clients
from provisioner.kube.credentials import in_cluster_credentials
from provisioner.kube.rate_limit import TokenBucket
from provisioner.kube.transport import RateLimitedApiClient

pytestmark = pytest.mark.cluster

ADMIN = "localcluster-admin"
REVIEW = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}


def who(clients: KubeClients) -> str:
    try:
        review = clients.request_json(
            "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", body=REVIEW, timeout=10
        )
        return str(review["status"]["userInfo"]["username"])
    finally:
        clients.close()


def write(path: Path, cluster: dict[str, Any], user: dict[str, Any]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    return str(path)


@pytest.fixture
def account(cluster: LocalCluster, cluster_namespace: str) -> tuple[str, str]:
    """A service account's token and its user name."""
    token = cluster.service_account_token(cluster_namespace, "default")
    return token, f"system:serviceaccount:{cluster_namespace}:default"


def test_the_admin_kubeconfig_with_certificate_data(cluster: LocalCluster) -> None:
    assert who(create_clients(str(cluster.kubeconfig), environ={})) == ADMIN


def test_certificate_files_relative_to_the_kubeconfig(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    shutil.copy(cluster.ca_cert, tmp_path / "ca.crt")
    (tmp_path / "pki").mkdir()
    shutil.copy(cluster.admin.cert, tmp_path / "pki" / "admin.crt")
    shutil.copy(cluster.admin.key, tmp_path / "pki" / "admin.key")
    path = write(
        tmp_path / "config",
        {"server": cluster.server, "certificate-authority": "ca.crt"},
        {"client-certificate": "pki/admin.crt", "client-key": "pki/admin.key"},
    )
    assert who(create_clients(path, environ={})) == ADMIN


def test_a_token_and_a_token_file(
    cluster: LocalCluster, tmp_path: Path, account: tuple[str, str]
) -> None:
    token, name = account
    server = {"server": cluster.server, "certificate-authority": str(cluster.ca_cert)}
    assert who(create_clients(write(tmp_path / "a", server, {"token": token}), environ={})) == name
    (tmp_path / "token").write_text(token)
    path = write(tmp_path / "b", server, {"tokenFile": "token"})
    assert who(create_clients(path, environ={})) == name


def test_server_name_and_verification(
    cluster: LocalCluster, tmp_path: Path, account: tuple[str, str]
) -> None:
    token, name = account
    ca = str(cluster.ca_cert)
    by_name = {
        "server": cluster.server,
        "certificate-authority": ca,
        "tls-server-name": "kubernetes",
    }
    assert who(create_clients(write(tmp_path / "a", by_name, {"token": token}), environ={})) == name

    wrong = {**by_name, "tls-server-name": "not-the-apiserver.example"}
    with pytest.raises(MaxRetryError, match="Hostname mismatch"):
        who(create_clients(write(tmp_path / "b", wrong, {"token": token}), environ={}))

    # Without its CA the server is not trusted, unless verification is off.
    unknown = {"server": cluster.server}
    with pytest.raises(MaxRetryError, match="CERTIFICATE_VERIFY_FAILED"):
        who(create_clients(write(tmp_path / "c", unknown, {"token": token}), environ={}))
    insecure = {"server": cluster.server, "insecure-skip-tls-verify": True}
    path = write(tmp_path / "d", insecure, {"token": token})
    with pytest.warns(InsecureRequestWarning):
        assert who(create_clients(path, environ={})) == name


def test_a_certificate_the_ssl_module_refuses_is_a_credentials_error(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    path = write(
        tmp_path / "config",
        {"server": cluster.server, "certificate-authority": str(cluster.ca_cert)},
        {"client-certificate": str(cluster.ca_cert), "client-key": str(cluster.admin.key)},
    )
    with pytest.raises(KubeConfigError, match=f"cannot use the credentials from {path}"):
        create_clients(path, environ={})


def test_an_exec_plugin_goes_through_the_kubernetes_clients_loader(
    cluster: LocalCluster, tmp_path: Path, account: tuple[str, str]
) -> None:
    token, name = account
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {"token": token},
    }
    plugin = tmp_path / "plugin.py"
    plugin.write_text(f"print({json.dumps(json.dumps(credential))})\n")
    path = write(
        tmp_path / "config",
        {"server": cluster.server, "certificate-authority": str(cluster.ca_cert)},
        {
            "exec": {
                "apiVersion": "client.authentication.k8s.io/v1",
                "command": sys.executable,
                "args": [str(plugin)],
                "interactiveMode": "Never",
            }
        },
    )
    assert who(create_clients(path, environ={})) == name


def test_in_cluster_with_the_service_account_directory(
    cluster: LocalCluster, tmp_path: Path, account: tuple[str, str]
) -> None:
    token, name = account
    (tmp_path / "token").write_text(token)
    shutil.copy(cluster.ca_cert, tmp_path / "ca.crt")
    host, port = cluster.server.removeprefix("https://").rsplit(":", 1)
    environ = {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}
    credentials = in_cluster_credentials(environ, tmp_path)
    api_client = RateLimitedApiClient(credentials, TokenBucket(10, 10), user_agent="test")
    assert who(KubeClients(api_client)) == name


def test_typed_calls_share_the_transport(clients: KubeClients, namespace: str) -> None:
    sent: list[tuple[str, str]] = []
    original = clients.api_client.call_api

    def recorded(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        sent.append((method, url))
        return original(method, url, *args, **kwargs)

    clients.api_client.call_api = recorded  # type: ignore[method-assign]
    pods = clients.core.list_namespaced_pod(namespace)
    assert pods.items == []
    assert sent == [
        ("GET", f"{clients.api_client.configuration.host}/api/v1/namespaces/{namespace}/pods")
    ]
