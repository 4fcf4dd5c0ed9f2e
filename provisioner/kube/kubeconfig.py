"""Reading kubeconfig files into `Credentials` (see `credentials` for why our own reader).

The rules are the ones Kubernetes documents for kubeconfig files, as kubectl applies them: in a
list ($KUBECONFIG) the first file to set a cluster, user, context or the current context wins,
and files that do not exist are skipped; relative paths are relative to the file that holds
them; `-data` is preferred over a file; the user's token (or tokenFile) over an exec plugin
over a username and password; the CA and the client certificate count only for an https
server. (The kubernetes client's loader differed in two corners of multi-file lists: the last
file's current-context won, and a user's certificate paths were read relative to the file of
the cluster.) An exec plugin or a gcp/oidc auth provider is left to that loader
(`PluginNeeded`).
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from provisioner.kube.credentials import (
    Authorization,
    Credentials,
    CredentialsError,
    FixedAuthorization,
    PluginNeeded,
    TokenFileAuthorization,
)

_PLUGIN_AUTH_PROVIDERS = ("gcp", "oidc")  # the ones the kubernetes client's loader runs
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class _Named:
    """A cluster, user or context entry and the directory of the file that named it."""

    value: Mapping[str, Any]
    base: Path


@dataclass
class MergedKubeconfig:
    """The files of a kubeconfig list taken together: the first to name an entry wins."""

    paths: list[str] = field(default_factory=list)
    clusters: dict[str, _Named] = field(default_factory=dict)
    users: dict[str, _Named] = field(default_factory=dict)
    contexts: dict[str, _Named] = field(default_factory=dict)
    current_context: str | None = None

    def add(self, path: str, document: Any) -> None:
        if not isinstance(document, Mapping):
            raise CredentialsError(f"{path} is not a kubeconfig (empty, or not a mapping)")
        self.paths.append(path)
        base = Path(path).parent.absolute()
        for key, named in (
            ("clusters", self.clusters),
            ("users", self.users),
            ("contexts", self.contexts),
        ):
            for entry in document.get(key) or []:
                if not isinstance(entry, Mapping) or "name" not in entry:
                    raise CredentialsError(f"{path}: every entry of {key} needs a name")
                named.setdefault(str(entry["name"]), _Named(entry, base))
        if document.get("current-context") and self.current_context is None:
            self.current_context = str(document["current-context"])


def read_kubeconfig(paths: str) -> MergedKubeconfig:
    """Read a kubeconfig path or a `:`-separated list of them ($KUBECONFIG); files that do not
    exist are skipped, as kubectl does, but not all of them."""
    merged = MergedKubeconfig()
    for path in paths.split(os.pathsep):
        if not path:
            continue
        expanded = Path(path).expanduser()
        if not expanded.exists():
            continue
        try:
            with expanded.open(encoding="utf-8") as file:
                document = yaml.load(file, Loader=_LOADER)  # noqa: S506 (a safe loader)
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
            raise CredentialsError(f"cannot read {expanded}: {e}") from e
        merged.add(str(expanded), document)
    if not merged.paths:
        raise CredentialsError(f"no kubeconfig file found at {paths}")
    return merged


def kubeconfig_credentials(
    merged: MergedKubeconfig, context: str | None = None
) -> Credentials | PluginNeeded:
    """The credentials of `context` (default: the current context)."""
    where = ", ".join(merged.paths)
    name = context or merged.current_context
    if not name:
        raise CredentialsError(f"{where}: no current-context is set and no context was chosen")
    chosen = merged.contexts.get(name)
    if chosen is None:
        known = ", ".join(sorted(merged.contexts)) or "none"
        raise CredentialsError(f"{where}: no context named {name!r} (contexts: {known})")
    spec = _mapping(chosen.value.get("context"), f"{where}: context {name!r}")
    cluster_name = str(spec.get("cluster") or "")
    cluster_entry = merged.clusters.get(cluster_name)
    if cluster_entry is None:
        raise CredentialsError(
            f"{where}: context {name!r} names cluster {cluster_name!r}, not found"
        )
    cluster = _mapping(cluster_entry.value.get("cluster"), f"{where}: cluster {cluster_name!r}")
    user: Mapping[str, Any] = {}
    user_base = cluster_entry.base
    user_name = spec.get("user")
    if user_name:
        user_entry = merged.users.get(str(user_name))
        if user_entry is not None:
            user = _mapping(user_entry.value.get("user"), f"{where}: user {user_name!r}")
            user_base = user_entry.base
    authorization, needs_plugin = _user_authorization(
        user, user_base, f"{where}: user {user_name!r}"
    )
    if needs_plugin:
        return PluginNeeded(os.pathsep.join(merged.paths), context)
    server = str(cluster.get("server") or "").rstrip("/")
    if not server:
        raise CredentialsError(f"{where}: cluster {cluster_name!r} has no server")
    credentials = Credentials(
        host=server,
        authorization=authorization,
        verify=not cluster.get("insecure-skip-tls-verify", False),
        tls_server_name=cluster.get("tls-server-name") or None,
        proxy=cluster.get("proxy-url") or None,
    )
    if not server.startswith("https"):
        return credentials
    ca_data = _data(cluster, "certificate-authority-data", f"{where}: cluster {cluster_name!r}")
    cert_data = _data(user, "client-certificate-data", f"{where}: user {user_name!r}")
    key_data = _data(user, "client-key-data", f"{where}: user {user_name!r}")
    return replace(
        credentials,
        ca_data=None if ca_data is None else ca_data.decode("utf-8", "replace"),
        ca_file=None if ca_data else _file(cluster, "certificate-authority", cluster_entry.base),
        cert_data=cert_data,
        cert_file=None if cert_data else _file(user, "client-certificate", user_base),
        key_data=key_data,
        key_file=None if key_data else _file(user, "client-key", user_base),
    )


def _user_authorization(
    user: Mapping[str, Any], base: Path, what: str
) -> tuple[Authorization, bool]:
    """The user's Authorization header source, or (_, True) when a plugin must provide it.
    Order as the kubernetes client's loader: auth provider, token, exec, username/password."""
    provider = user.get("auth-provider")
    if isinstance(provider, Mapping) and provider.get("name") in _PLUGIN_AUTH_PROVIDERS:
        return Authorization(), True
    if "token" in user:
        token = str(user["token"] or "")
        if token:
            return FixedAuthorization(f"Bearer {token}"), False
    elif user.get("tokenFile"):
        try:
            return TokenFileAuthorization(_path(user["tokenFile"], base)), False
        except CredentialsError as e:
            raise CredentialsError(f"{what}: {e}") from e
    if user.get("exec"):
        return Authorization(), True
    if "username" in user and "password" in user:
        pair = f"{user['username']}:{user['password']}".encode()
        return FixedAuthorization(f"Basic {base64.b64encode(pair).decode('ascii')}"), False
    return Authorization(), False


def _mapping(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise CredentialsError(f"{what} is missing or not a mapping")
    return value


def _data(entry: Mapping[str, Any], key: str, what: str) -> bytes | None:
    value = entry.get(key)
    if not value:
        return None
    try:
        # Line breaks (wrapped data) are ignored; anything else that is not base64 is an error.
        return base64.b64decode("".join(str(value).split()), validate=True)
    except (binascii.Error, ValueError) as e:
        raise CredentialsError(f"{what}: {key} is not valid base64: {e}") from e


def _file(entry: Mapping[str, Any], key: str, base: Path) -> str | None:
    value = entry.get(key)
    return _path(value, base) if value else None


def _path(value: Any, base: Path) -> str:
    return os.path.normpath(base / Path(str(value)).expanduser())
