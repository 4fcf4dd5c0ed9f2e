"""Where the API server is and how to prove who we are, as plain `Credentials`: from the
in-cluster service account here, from a kubeconfig in `kubeconfig`.

Our own readers instead of the kubernetes client's loader: importing that (the package imports
all of itself; its config module pulls in requests, oauthlib and more) cost a tenth of the CPU
of a start-up at 10,000 volumes and 10 MiB for good, for auth plugins this provisioner rarely
meets. A kubeconfig user whose credentials come from an `exec` plugin or a gcp/oidc
`auth-provider` has them read by that loader (`credentials_via_plugin`, imported then), which
runs and refreshes those.

Tokens that change on disk (the service account's, projected and rotated by the kubelet, or a
kubeconfig's tokenFile) are read again once a minute, as client-go does.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_REREAD_SECONDS = 60.0


class CredentialsError(Exception):
    """The kubeconfig or the service account cannot give usable credentials; says why."""


class Authorization:
    """The value of the Authorization header, None for none (client certificates only)."""

    def header(self) -> str | None:
        return None


@dataclass(frozen=True)
class FixedAuthorization(Authorization):
    value: str

    def header(self) -> str | None:
        return self.value


class TokenFileAuthorization(Authorization):
    """A bearer token read from a file, read again when older than `reread_seconds`. A failed
    or empty read keeps the last token: the kubelet swaps a rotated token in atomically, so that
    is a passing glitch, and the API server says so if the old one has really expired."""

    def __init__(
        self,
        path: str,
        reread_seconds: float = TOKEN_REREAD_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self._reread_seconds = reread_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._token = _read_token(path)
        self._read_at = clock()

    def header(self) -> str | None:
        with self._lock:
            if self._clock() - self._read_at >= self._reread_seconds:
                self._read_at = self._clock()
                with contextlib.suppress(CredentialsError):
                    self._token = _read_token(self.path)
            return f"Bearer {self._token}"


class CallbackAuthorization(Authorization):
    """A header computed on every request (auth plugins that refresh their tokens)."""

    def __init__(self, callback: Callable[[], str | None]) -> None:
        self._callback = callback

    def header(self) -> str | None:
        return self._callback()


@dataclass(frozen=True)
class Credentials:
    host: str
    """The server's URL without a trailing slash, e.g. https://10.96.0.1:443."""
    authorization: Authorization = field(default_factory=Authorization)
    ca_file: str | None = None
    ca_data: str | None = None
    """PEM text of the CA bundle (the kubeconfig's certificate-authority-data, decoded)."""
    cert_file: str | None = None
    key_file: str | None = None
    cert_data: bytes | None = None
    key_data: bytes | None = None
    verify: bool = True
    """False for insecure-skip-tls-verify."""
    tls_server_name: str | None = None
    proxy: str | None = None


@dataclass(frozen=True)
class PluginNeeded:
    """The chosen user authenticates through an exec plugin or an auth provider."""

    path: str
    context: str | None


def in_cluster_credentials(
    environ: Mapping[str, str], account_dir: Path = SERVICE_ACCOUNT_DIR
) -> Credentials:
    """The pod's service account: the API at $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT,
    its token and the cluster's CA from the mounted account directory."""
    host = environ.get("KUBERNETES_SERVICE_HOST", "")
    port = environ.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise CredentialsError(
            "KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must both be set in a pod"
        )
    ca_file = account_dir / "ca.crt"
    try:
        if not ca_file.read_bytes():
            raise CredentialsError(f"the service account's CA file {ca_file} is empty")
    except OSError as e:
        raise CredentialsError(f"cannot read the service account's CA file: {e}") from e
    return Credentials(
        host=f"https://{join_host_port(host, port)}",
        authorization=TokenFileAuthorization(str(account_dir / "token")),
        ca_file=str(ca_file),
    )


def join_host_port(host: str, port: str) -> str:
    """As Go's net.JoinHostPort: an IPv6 address goes in brackets."""
    return f"[{host}]:{port}" if ":" in host or "%" in host else f"{host}:{port}"


def _read_token(path: str) -> str:
    try:
        token = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise CredentialsError(f"cannot read the token file: {e}") from e
    if not token:
        raise CredentialsError(f"the token file {path} is empty")
    return token


def credentials_via_plugin(needed: PluginNeeded) -> Credentials:
    """Credentials from the kubernetes client's loader, for an exec plugin or an auth provider:
    it runs the plugin, and its refresh hook runs it again when the token expires (called on
    every request, through the Authorization header)."""
    from kubernetes import client as k8s  # noqa: PLC0415 (only for these users)
    from kubernetes import config as k8s_config  # noqa: PLC0415

    configuration = k8s.Configuration()
    try:
        k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=needed.path,
            context=needed.context,
            client_configuration=configuration,
            persist_config=False,
        )
    except (k8s_config.ConfigException, OSError, ValueError) as e:
        raise CredentialsError(str(e)) from e

    def header() -> str | None:
        value: str | None = configuration.get_api_key_with_prefix(
            "BearerToken", alias="authorization"
        )
        return value

    return Credentials(
        host=str(configuration.host),
        authorization=CallbackAuthorization(header),
        ca_file=configuration.ssl_ca_cert,
        cert_file=configuration.cert_file,
        key_file=configuration.key_file,
        verify=bool(configuration.verify_ssl),
        tls_server_name=configuration.tls_server_name,
        proxy=configuration.proxy,
    )
