"""Reading kubeconfig files and the service account into Credentials, without a cluster (the
cluster tests in test_credentials_cluster.py send requests with each form)."""

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from provisioner.kube.credentials import (
    Credentials,
    CredentialsError,
    FixedAuthorization,
    PluginNeeded,
    TokenFileAuthorization,
    in_cluster_credentials,
    join_host_port,
)
from provisioner.kube.kubeconfig import kubeconfig_credentials, read_kubeconfig

CA_PEM = b"-----BEGIN CERTIFICATE-----\nnot really\n-----END CERTIFICATE-----\n"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def kubeconfig(
    path: Path,
    *,
    user: dict[str, Any] | None = None,
    cluster: dict[str, Any] | None = None,
    current: str | None = "main",
    name: str = "main",
) -> Path:
    document: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster or {"server": "https://10.0.0.1:6443/"}}],
        "users": [{"name": name, "user": user if user is not None else {"token": "t-" + name}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
    }
    if current is not None:
        document["current-context"] = current
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document))
    return path


def load(path: Path | str, context: str | None = None) -> Credentials:
    found = kubeconfig_credentials(read_kubeconfig(str(path)), context)
    assert isinstance(found, Credentials)
    return found


def test_token_server_and_tls_settings(tmp_path: Path) -> None:
    credentials = load(
        kubeconfig(
            tmp_path / "config",
            cluster={
                "server": "https://10.0.0.1:6443/",
                "certificate-authority-data": b64(CA_PEM),
                "tls-server-name": "kubernetes",
                "proxy-url": "http://proxy:3128",
            },
        )
    )
    assert credentials.host == "https://10.0.0.1:6443"  # the trailing slash goes
    assert credentials.authorization.header() == "Bearer t-main"
    assert credentials.ca_data == CA_PEM.decode()
    assert credentials.ca_file is None
    assert credentials.verify
    assert (credentials.tls_server_name, credentials.proxy) == ("kubernetes", "http://proxy:3128")


def test_client_certificates_as_data_or_files_relative_to_their_file(tmp_path: Path) -> None:
    as_data = load(
        kubeconfig(
            tmp_path / "data",
            user={"client-certificate-data": b64(b"CERT"), "client-key-data": b64(b"KEY")},
        )
    )
    assert (as_data.cert_data, as_data.key_data) == (b"CERT", b"KEY")
    assert (as_data.cert_file, as_data.key_file) == (None, None)
    assert as_data.authorization.header() is None

    as_files = load(
        kubeconfig(
            tmp_path / "sub" / "files",
            user={"client-certificate": "pki/admin.crt", "client-key": "/abs/admin.key"},
            cluster={"server": "https://h", "certificate-authority": "../ca.crt"},
        )
    )
    assert as_files.cert_file == str(tmp_path / "sub" / "pki" / "admin.crt")
    assert as_files.key_file == "/abs/admin.key"
    assert as_files.ca_file == str(tmp_path / "ca.crt")

    both = load(
        kubeconfig(
            tmp_path / "both",
            cluster={
                "server": "https://h",
                "certificate-authority": "ca.crt",
                "certificate-authority-data": b64(CA_PEM),
            },
        )
    )
    assert (both.ca_file, both.ca_data) == (None, CA_PEM.decode())  # data wins


def test_a_plain_http_server_takes_no_tls_settings(tmp_path: Path) -> None:
    credentials = load(
        kubeconfig(
            tmp_path / "config",
            user={"client-certificate": "a.crt", "client-key": "a.key"},
            cluster={"server": "http://127.0.0.1:8080", "certificate-authority": "ca.crt"},
        )
    )
    assert (credentials.ca_file, credentials.cert_file, credentials.key_file) == (None,) * 3


def test_insecure_skip_tls_verify(tmp_path: Path) -> None:
    credentials = load(
        kubeconfig(
            tmp_path / "config",
            cluster={"server": "https://h", "insecure-skip-tls-verify": True},
        )
    )
    assert not credentials.verify


def test_token_then_token_file_then_exec_then_basic_auth(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("from-file")
    exec_plugin = {"apiVersion": "client.authentication.k8s.io/v1", "command": "get-token"}
    cases: list[tuple[dict[str, Any], str | None]] = [
        ({"token": "inline", "tokenFile": "token", "exec": exec_plugin}, "Bearer inline"),
        ({"tokenFile": "token", "exec": exec_plugin}, "Bearer from-file"),
        ({"username": "u", "password": "p:w"}, "Basic " + b64(b"u:p:w")),
        ({"auth-provider": {"name": "azure"}, "token": "t"}, "Bearer t"),
        ({}, None),
    ]
    for user, header in cases:
        credentials = load(kubeconfig(tmp_path / "config", user=user))
        assert credentials.authorization.header() == header, user


@pytest.mark.parametrize(
    "user",
    [
        {"exec": {"command": "get-token"}},
        {"exec": {"command": "get-token"}, "token": ""},
        {"auth-provider": {"name": "oidc", "config": {}}, "token": "ignored"},
        {"auth-provider": {"name": "gcp"}},
    ],
)
def test_plugins_are_left_to_the_kubernetes_clients_loader(
    tmp_path: Path, user: dict[str, Any]
) -> None:
    path = kubeconfig(tmp_path / "config", user=user)
    found = kubeconfig_credentials(read_kubeconfig(str(path)), "main")
    assert found == PluginNeeded(str(path), "main")


def test_the_first_file_of_a_list_wins_and_missing_files_are_skipped(tmp_path: Path) -> None:
    first = kubeconfig(tmp_path / "a" / "first", name="shared", current="shared")
    second = kubeconfig(tmp_path / "b" / "second", name="shared", current="other")
    # The second file adds a context whose cluster and user come from the first.
    document = json.loads(second.read_text())
    document["contexts"].append({"name": "other", "context": {"cluster": "shared"}})
    second.write_text(json.dumps(document))
    listed = f"{tmp_path / 'absent'}:{first}:{second}"
    merged = read_kubeconfig(listed)
    assert merged.paths == [str(first), str(second)]
    assert merged.current_context == "shared"
    assert load(listed).host == "https://10.0.0.1:6443"
    assert load(listed, "other").authorization.header() is None  # that context names no user


def test_a_user_the_context_names_but_nobody_defines_means_no_credentials(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "config")
    document = json.loads(path.read_text())
    document["contexts"][0]["context"]["user"] = "ghost"
    path.write_text(json.dumps(document))
    assert load(path).authorization.header() is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.pop("current-context"), "no current-context is set"),
        (
            lambda d: d.update({"current-context": "nope"}),
            "no context named 'nope' (contexts: main)",
        ),
        (lambda d: d["contexts"][0]["context"].update(cluster="gone"), "names cluster 'gone'"),
        (lambda d: d["clusters"][0]["cluster"].pop("server"), "cluster 'main' has no server"),
        (lambda d: d["clusters"].append({"cluster": {}}), "every entry of clusters needs a name"),
        (
            lambda d: d["users"][0]["user"].update({"client-certificate-data": "%%%"}),
            "user 'main': client-certificate-data is not valid base64",
        ),
        (lambda d: d["users"][0].update(user="x"), "user 'main' is missing or not a mapping"),
    ],
)
def test_a_broken_kubeconfig_says_what_is_wrong_and_where(
    tmp_path: Path, change: Any, message: str
) -> None:
    path = kubeconfig(tmp_path / "config")
    document = json.loads(path.read_text())
    change(document)
    path.write_text(json.dumps(document))
    with pytest.raises(CredentialsError, match=str(path)) as error:
        load(path)
    assert message in str(error.value)


def test_unreadable_empty_or_absent_files(tmp_path: Path) -> None:
    with pytest.raises(CredentialsError, match="no kubeconfig file found at"):
        read_kubeconfig(str(tmp_path / "absent"))
    (tmp_path / "empty").write_text("")
    with pytest.raises(CredentialsError, match="not a kubeconfig"):
        read_kubeconfig(str(tmp_path / "empty"))
    (tmp_path / "bad").write_text("clusters: [")
    with pytest.raises(CredentialsError, match="cannot read"):
        read_kubeconfig(str(tmp_path / "bad"))
    path = kubeconfig(tmp_path / "config", user={"tokenFile": "missing-token"})
    with pytest.raises(CredentialsError, match="cannot read the token file"):
        load(path)


def test_yaml_kubeconfig(tmp_path: Path) -> None:
    (tmp_path / "config").write_text(
        "apiVersion: v1\n"
        "clusters:\n- name: c\n  cluster:\n    server: https://h:443\n"
        "users:\n- name: u\n  user:\n    token: abc\n"
        "contexts:\n- name: x\n  context: {cluster: c, user: u}\n"
        "current-context: x\n"
    )
    credentials = load(tmp_path / "config")
    assert (credentials.host, credentials.authorization.header()) == ("https://h:443", "Bearer abc")


def service_account(directory: Path, token: str = "sa-token", ca: bytes = CA_PEM) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "token").write_text(token)
    (directory / "ca.crt").write_bytes(ca)
    return directory


def test_in_cluster(tmp_path: Path) -> None:
    account = service_account(tmp_path / "sa")
    environ = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    credentials = in_cluster_credentials(environ, account)
    assert credentials.host == "https://10.96.0.1:443"
    assert credentials.ca_file == str(account / "ca.crt")
    assert credentials.verify
    assert credentials.authorization.header() == "Bearer sa-token"
    environ["KUBERNETES_SERVICE_HOST"] = "fd00::1"
    assert in_cluster_credentials(environ, account).host == "https://[fd00::1]:443"


def test_in_cluster_without_what_a_pod_has(tmp_path: Path) -> None:
    environ = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    with pytest.raises(CredentialsError, match="KUBERNETES_SERVICE_PORT must both be set"):
        in_cluster_credentials({"KUBERNETES_SERVICE_HOST": "10.96.0.1"}, tmp_path)
    with pytest.raises(CredentialsError, match="cannot read the service account's CA file"):
        in_cluster_credentials(environ, tmp_path)
    with pytest.raises(CredentialsError, match="is empty"):
        in_cluster_credentials(environ, service_account(tmp_path / "a", ca=b""))
    with pytest.raises(CredentialsError, match=r"token file .* is empty"):
        in_cluster_credentials(environ, service_account(tmp_path / "b", token=""))


class ManualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_token_file_is_read_again_each_minute_and_a_bad_read_keeps_the_last(
    tmp_path: Path,
) -> None:
    path = tmp_path / "token"
    path.write_text("first")
    clock = ManualClock()
    authorization = TokenFileAuthorization(str(path), clock=clock)
    path.write_text("second")
    clock.now = 59.0
    assert authorization.header() == "Bearer first"
    clock.now = 60.0
    assert authorization.header() == "Bearer second"
    path.write_text("")  # mid-rotation, or whatever it was: not a reason to send nothing
    clock.now = 121.0
    assert authorization.header() == "Bearer second"
    path.unlink()
    clock.now = 182.0
    assert authorization.header() == "Bearer second"
    path.write_text("third")
    clock.now = 243.0
    assert authorization.header() == "Bearer third"


def test_helpers() -> None:
    assert join_host_port("10.0.0.1", "443") == "10.0.0.1:443"
    assert join_host_port("::1", "6443") == "[::1]:6443"
    assert FixedAuthorization("Bearer x").header() == "Bearer x"
