"""Puts a helper pod's volumes on disk, as a kubelet would before starting the container.

Why: the sandbox only bind-mounts directories. hostPath volumes are directories under the
node's directory (created or checked per hostPath `type`); ConfigMap, downward-API, projected
(service-account token) and emptyDir volumes are written out as files, honouring `items` and
file modes (Secret volumes are not emulated: no pod the harness runs mounts one). A missing
ConfigMap or hostPath leaves the pod waiting, as on a node, with the reason in its waiting
message (a kubelet says a hostPath type is wrong only in a FailedMount event; the real nodes
test how the provisioner reads that: tests/provisioner/e2e/real_nodes/).
Helper pods get plain files once (`materialize`); long-running pods get each volume's files
(`volume_files`) written atomically and rewritten on change. A pod's service-account token is
requested once and kept: the API server makes a `kube-api-access` token (3607 s asked) valid
for a year (--service-account-extend-token-expiration), which no test outlives; a kubelet's
renewal at 80% of the asked life is left to the real nodes.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from http import HTTPStatus
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from localcluster.atomic_writer import UnsafeVolumePathError, VolumeFile, clean_relative_path
from localcluster.helper_pods import MATERIALIZED_VOLUME_KINDS, node_host_path
from localcluster.pod_env import pod_field
from localcluster.raw_api import call_json

DEFAULT_FILE_MODE = 0o644
DEFAULT_TOKEN_SECONDS = 3600


class VolumeNotReadyError(Exception):
    """A volume cannot be set up yet (its ConfigMap or hostPath is missing); retried later."""


def prepare_host_paths(pod: Mapping[str, Any], node_dir: Path) -> None:
    """Creates or checks each hostPath volume's directory or file under the node's directory."""
    for volume in pod["spec"].get("volumes") or []:
        host_path = volume.get("hostPath")
        if host_path is None:
            continue
        path = node_host_path(node_dir, host_path["path"])
        kind = host_path.get("type") or ""
        if kind in ("", "DirectoryOrCreate"):
            if not path.exists():
                path.mkdir(parents=True, exist_ok=True)
        elif kind == "FileOrCreate":
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch(exist_ok=True)
        elif (kind == "Directory" and not path.is_dir()) or (kind == "File" and not path.is_file()):
            raise VolumeNotReadyError(f"hostPath {host_path['path']} is not a {kind.lower()}")
        elif not path.exists():
            raise VolumeNotReadyError(f"hostPath {host_path['path']} ({kind}) does not exist")


def _write_file(directory: Path, relative: str, content: bytes, mode: int) -> None:
    try:
        cleaned = clean_relative_path(relative)
    except UnsafeVolumePathError as error:
        raise VolumeNotReadyError(str(error)) from error
    path = directory / cleaned
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    path.chmod(mode)


def _config_map_files(
    obj: Mapping[str, Any], items: list[dict[str, Any]] | None, default_mode: int
) -> list[tuple[str, bytes, int]]:
    """(path, content, mode) for the keys of a ConfigMap."""
    contents: dict[str, bytes] = {}
    for key, value in (obj.get("data") or {}).items():
        contents[key] = str(value).encode("utf-8")
    for key, value in (obj.get("binaryData") or {}).items():
        contents[key] = base64.b64decode(value)
    if not items:
        return [(key, content, default_mode) for key, content in contents.items()]
    files = []
    for item in items:
        if item["key"] not in contents:
            raise VolumeNotReadyError(f"key {item['key']!r} is missing")
        files.append((item["path"], contents[item["key"]], item.get("mode", default_mode)))
    return files


class VolumeMaterializer:
    """Computes and writes the non-hostPath volumes of one pod into `volumes_dir/<name>`."""

    def __init__(
        self,
        core: client.CoreV1Api,
        pod: Mapping[str, Any],
        volumes_dir: Path,
    ) -> None:
        self.core = core
        self.pod = pod
        self.namespace: str = pod["metadata"]["namespace"]
        self.volumes_dir = volumes_dir
        self._tokens: dict[tuple[str, int], str] = {}

    def materialized_volumes(self) -> list[tuple[str, str, dict[str, Any]]]:
        """(name, kind, source) of each volume written out rather than bind-mounted."""
        found = []
        for volume in self.pod["spec"].get("volumes") or []:
            kind = next((k for k in MATERIALIZED_VOLUME_KINDS if k in volume), None)
            if kind is not None:
                found.append((volume["name"], kind, volume[kind] or {}))
        return found

    def materialize(self) -> dict[str, Path]:
        """Writes every volume once, as plain files (helper pods)."""
        directories: dict[str, Path] = {}
        for name, kind, source in self.materialized_volumes():
            directory = self.volumes_dir / name
            directory.mkdir(parents=True, exist_ok=True)
            for path, content, mode in self.volume_files(kind, source):
                _write_file(directory, path, content, mode)
            directories[name] = directory
        return directories

    def volume_files(self, kind: str, source: dict[str, Any]) -> list[VolumeFile]:
        """The files of one volume now (empty for emptyDir)."""
        mode = source.get("defaultMode", DEFAULT_FILE_MODE)
        if kind == "emptyDir":
            return []
        if kind != "projected":
            return self._files(kind, source, mode)
        files: list[VolumeFile] = []
        for projection in source.get("sources") or []:
            token = projection.get("serviceAccountToken")
            if token is not None:
                files.append((token["path"], self._token(token).encode("utf-8"), mode))
                continue
            for projected_kind in ("configMap", "downwardAPI"):
                if projected_kind in projection:
                    files.extend(self._files(projected_kind, projection[projected_kind], mode))
        return files

    def _files(self, kind: str, source: dict[str, Any], mode: int) -> list[VolumeFile]:
        if kind == "downwardAPI":
            return [
                (item["path"], self._field(item), item.get("mode", mode))
                for item in source.get("items") or []
            ]
        name = str(source.get("name"))
        try:
            obj = call_json(self.core.read_namespaced_config_map, name, self.namespace)
        except ApiException as error:
            if error.status == HTTPStatus.NOT_FOUND and source.get("optional"):
                return []
            raise VolumeNotReadyError(f"{kind} {self.namespace}/{name}: {error.reason}") from error
        return _config_map_files(obj, source.get("items"), mode)

    def _token(self, projection: dict[str, Any]) -> str:
        """A TokenRequest bound to the pod, made once."""
        audience = str(projection.get("audience") or "")
        seconds = int(projection.get("expirationSeconds", DEFAULT_TOKEN_SECONDS))
        cached = self._tokens.get((audience, seconds))
        if cached is not None:
            return cached
        metadata = self.pod["metadata"]
        request = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(
                audiences=[audience] if audience else None,
                expiration_seconds=seconds,
                bound_object_ref=client.V1BoundObjectReference(
                    api_version="v1", kind="Pod", name=metadata["name"], uid=metadata["uid"]
                ),
            )
        )
        account = self.pod["spec"].get("serviceAccountName") or "default"
        response = self.core.create_namespaced_service_account_token(
            account, self.namespace, request
        )
        if response.status is None or not response.status.token:
            raise VolumeNotReadyError(f"no token issued for service account {account}")
        token = str(response.status.token)
        self._tokens[(audience, seconds)] = token
        return token

    def _field(self, item: dict[str, Any]) -> bytes:
        field_path = (item.get("fieldRef") or {}).get("fieldPath", "")
        return pod_field(self.pod, field_path).encode("utf-8")
