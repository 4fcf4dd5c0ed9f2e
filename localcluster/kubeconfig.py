"""Kubeconfig files for the admin, each component and service-account tokens.

Why: every client of the local cluster (the components, kubectl, the Pulumi provider, the
provisioner under test) takes a kubeconfig. Credentials are embedded so a file stays valid on
its own, wherever it is copied.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml

CLUSTER_NAME = "localcluster"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def build_kubeconfig(
    server: str,
    ca_pem: bytes,
    user: str,
    *,
    client_cert_pem: bytes | None = None,
    client_key_pem: bytes | None = None,
    token: str | None = None,
    namespace: str | None = None,
) -> dict[str, Any]:
    """A one-cluster, one-user, one-context kubeconfig document."""
    credentials: dict[str, str] = {}
    if client_cert_pem is not None and client_key_pem is not None:
        credentials["client-certificate-data"] = _b64(client_cert_pem)
        credentials["client-key-data"] = _b64(client_key_pem)
    if token is not None:
        credentials["token"] = token
    context: dict[str, str] = {"cluster": CLUSTER_NAME, "user": user}
    if namespace:
        context["namespace"] = namespace
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": CLUSTER_NAME,
                "cluster": {"server": server, "certificate-authority-data": _b64(ca_pem)},
            }
        ],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": user, "context": context}],
        "current-context": user,
    }


def write_kubeconfig(path: Path, document: dict[str, Any]) -> Path:
    """Writes `document` readable by its owner only (it holds credentials)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    path.chmod(0o600)
    return path
