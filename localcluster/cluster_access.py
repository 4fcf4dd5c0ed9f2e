"""Talking to a local cluster: API clients, service-account tokens and kubeconfigs, waits.

Why: tests, the demo and benchmarks all need the same few conveniences on top of the official
`kubernetes` client (an admin client, a client or kubeconfig for a service account's token, a
namespace whose default service account exists, waiting for a pod to reach a state). They only
need the cluster's address and credentials, not its processes, so they live apart from the
code that runs the cluster.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from http import HTTPStatus
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from localcluster.certificates import KeyPair
from localcluster.cluster_dirs import pod_log_path
from localcluster.control_plane import admin_ssl_context, https_get
from localcluster.errors import ClusterError
from localcluster.kubeconfig import build_kubeconfig, write_kubeconfig
from localcluster.raw_api import call_json

T = TypeVar("T")
DEFAULT_WAIT_SECONDS = 60.0


def wait_for(
    probe: Callable[[], T | None], timeout: float, description: str, interval: float = 0.1
) -> T:
    """Polls `probe` until it returns something other than None; raises TimeoutError naming
    `description` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {description}")
        time.sleep(interval)


class ClusterAccess:
    """Clients and helpers for a cluster reachable at `server` with admin credentials."""

    def __init__(self, server: str, ca_cert: Path, admin: KeyPair, cluster_dir: Path) -> None:
        self.server = server
        self.ca_cert = ca_cert
        self.admin = admin
        self.dir = cluster_dir
        self._admin_client: client.ApiClient | None = None

    def _configuration(self) -> client.Configuration:
        configuration = client.Configuration()
        configuration.host = self.server
        configuration.ssl_ca_cert = str(self.ca_cert)
        configuration.connection_pool_maxsize = 16
        return configuration

    @property
    def admin_client(self) -> client.ApiClient:
        """A shared ApiClient with cluster-admin rights (system:masters), closed on stop."""
        if self._admin_client is None:
            configuration = self._configuration()
            configuration.cert_file = str(self.admin.cert)
            configuration.key_file = str(self.admin.key)
            self._admin_client = client.ApiClient(configuration)
        return self._admin_client

    def core_v1(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.admin_client)

    def storage_v1(self) -> client.StorageV1Api:
        return client.StorageV1Api(self.admin_client)

    def apps_v1(self) -> client.AppsV1Api:
        return client.AppsV1Api(self.admin_client)

    def rbac_v1(self) -> client.RbacAuthorizationV1Api:
        return client.RbacAuthorizationV1Api(self.admin_client)

    def client_for_token(self, token: str) -> client.ApiClient:
        """A new ApiClient authenticating with a bearer token (the caller closes it)."""
        configuration = self._configuration()
        configuration.api_key = {"authorization": token}
        configuration.api_key_prefix = {"authorization": "Bearer"}
        return client.ApiClient(configuration)

    def service_account_token(
        self, namespace: str, name: str, expiration_seconds: int = 3600
    ) -> str:
        """A token for the service account from the TokenRequest API."""
        request = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=expiration_seconds)
        )
        response = self.core_v1().create_namespaced_service_account_token(name, namespace, request)
        if response.status is None or not response.status.token:
            raise ClusterError(f"localcluster: no token issued for {namespace}/{name}")
        return str(response.status.token)

    def service_account_kubeconfig(
        self, namespace: str, name: str, path: Path | None = None, expiration_seconds: int = 3600
    ) -> Path:
        """A kubeconfig that authenticates as the service account (default namespace set)."""
        token = self.service_account_token(namespace, name, expiration_seconds)
        target = path or self.dir / "kubeconfigs" / f"sa-{namespace}-{name}.kubeconfig"
        document = build_kubeconfig(
            self.server,
            self.ca_cert.read_bytes(),
            f"system:serviceaccount:{namespace}:{name}",
            token=token,
            namespace=namespace,
        )
        return write_kubeconfig(target, document)

    def create_namespace(self, name: str, timeout: float = DEFAULT_WAIT_SECONDS) -> None:
        """Creates the namespace (if absent) and waits for its `default` service account, which
        the controller-manager creates and which pods need to be admitted."""
        core = self.core_v1()
        try:
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        except ApiException as error:
            if error.status != HTTPStatus.CONFLICT:
                raise

        def default_account() -> bool | None:
            try:
                core.read_namespaced_service_account("default", name)
            except ApiException as error:
                if error.status == HTTPStatus.NOT_FOUND:
                    return None
                raise
            return True

        wait_for(default_account, timeout, f"service account {name}/default")

    def create_pod(self, namespace: str, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """Creates a pod from a plain manifest; returns it as the API stored it."""
        body: Any = dict(manifest)  # the client sends plain dicts as they are
        return call_json(self.core_v1().create_namespaced_pod, namespace, body)

    def read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The pod as a plain dict (as the API returns it), or None when it does not exist."""
        try:
            return call_json(self.core_v1().read_namespaced_pod, name, namespace)
        except ApiException as error:
            if error.status == HTTPStatus.NOT_FOUND:
                return None
            raise

    def wait_for_pod(
        self,
        namespace: str,
        name: str,
        condition: Callable[[dict[str, Any]], bool],
        timeout: float = DEFAULT_WAIT_SECONDS,
        description: str = "condition",
    ) -> dict[str, Any]:
        """Polls the pod until `condition(pod)` holds; returns the pod."""

        def probe() -> dict[str, Any] | None:
            pod = self.read_pod(namespace, name)
            return pod if pod is not None and condition(pod) else None

        return wait_for(probe, timeout, f"pod {namespace}/{name}: {description}")

    def wait_for_pod_phase(
        self,
        namespace: str,
        name: str,
        phases: tuple[str, ...],
        timeout: float = DEFAULT_WAIT_SECONDS,
    ) -> dict[str, Any]:
        return self.wait_for_pod(
            namespace,
            name,
            lambda pod: (pod.get("status") or {}).get("phase") in phases,
            timeout,
            f"phase in {phases}",
        )

    def pod_log_path(self, namespace: str, name: str, uid: str) -> Path:
        """The full output of a pod run by the harness (helper or image-table pod; each
        restart's output appended after a separator line)."""
        return pod_log_path(self.dir, namespace, name, uid)

    def apiserver_metrics(self) -> str:
        """The kube-apiserver's Prometheus /metrics text (read with the admin certificate)."""
        port = int(self.server.rsplit(":", 1)[1])
        context = admin_ssl_context(self.ca_cert, self.admin)
        code, body = https_get(port, "/metrics", context, timeout=30)
        if code != 200:
            raise ClusterError(f"localcluster: GET /metrics answered {code}")
        return body.decode("utf-8")

    def close(self) -> None:
        if self._admin_client is not None:
            self._admin_client.close()  # type: ignore[no-untyped-call]
            self._admin_client = None
