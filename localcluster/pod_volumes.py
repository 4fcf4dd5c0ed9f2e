"""Puts a helper pod's volumes on disk, as a kubelet would before starting the container.

Why: the sandbox only bind-mounts directories. hostPath volumes are directories under the
node's directory (created or checked per hostPath `type`); ConfigMap, Secret, downward-API,
projected (service-account token) and emptyDir volumes are written out as files, honouring
`items` and file modes. A missing ConfigMap or hostPath leaves the pod waiting, as on a node.
"""

from __future__ import annotations

import base64
import posixpath
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from localcluster.helper_pods import MATERIALIZED_VOLUME_KINDS, node_host_path
from localcluster.raw_api import call_json

DEFAULT_FILE_MODE = 0o644
DEFAULT_TOKEN_SECONDS = 3600
HTTP_NOT_FOUND = 404


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
        elif kind == "Directory" and not path.is_dir():
            raise VolumeNotReadyError(
                f"hostPath {host_path['path']} is not a directory on the node"
            )
        elif kind == "File" and not path.is_file():
            raise VolumeNotReadyError(f"hostPath {host_path['path']} is not a file on the node")
        elif kind not in ("Directory", "File") and not path.exists():
            raise VolumeNotReadyError(f"hostPath {host_path['path']} ({kind}) does not exist")


def _write_file(directory: Path, relative: str, content: bytes, mode: int) -> None:
    cleaned = posixpath.normpath(relative)
    if cleaned.startswith(("/", "..")):
        raise VolumeNotReadyError(f"volume item path {relative!r} leaves the volume")
    path = directory / cleaned
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    path.chmod(mode)


def _object_files(
    obj: Mapping[str, Any],
    *,
    encoded: bool,
    items: list[dict[str, Any]] | None,
    default_mode: int,
) -> list[tuple[str, bytes, int]]:
    """(path, content, mode) for the keys of a ConfigMap (encoded=False) or a Secret."""
    contents: dict[str, bytes] = {}
    for key, value in (obj.get("data") or {}).items():
        contents[key] = base64.b64decode(value) if encoded else str(value).encode("utf-8")
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
    """Writes the non-hostPath volumes of one pod into `volumes_dir/<volume name>`."""

    def __init__(self, core: client.CoreV1Api, pod: Mapping[str, Any], volumes_dir: Path) -> None:
        self.core = core
        self.pod = pod
        self.namespace: str = pod["metadata"]["namespace"]
        self.volumes_dir = volumes_dir

    def materialize(self) -> dict[str, Path]:
        directories: dict[str, Path] = {}
        for volume in self.pod["spec"].get("volumes") or []:
            kind = next((k for k in MATERIALIZED_VOLUME_KINDS if k in volume), None)
            if kind is None:
                continue
            directory = self.volumes_dir / volume["name"]
            directory.mkdir(parents=True, exist_ok=True)
            source = volume[kind] or {}
            mode = source.get("defaultMode", DEFAULT_FILE_MODE)
            if kind == "projected":
                for projection in source.get("sources") or []:
                    self._write_projection(directory, projection, mode)
            elif kind != "emptyDir":
                for path, content, file_mode in self._files(kind, source, mode):
                    _write_file(directory, path, content, file_mode)
            directories[volume["name"]] = directory
        return directories

    def _files(self, kind: str, source: dict[str, Any], mode: int) -> list[tuple[str, bytes, int]]:
        if kind == "downwardAPI":
            return [
                (item["path"], self._field(item), item.get("mode", mode))
                for item in source.get("items") or []
            ]
        name = source.get("name") if kind == "configMap" else source.get("secretName")
        try:
            if kind == "configMap":
                obj = call_json(self.core.read_namespaced_config_map, name, self.namespace)
            else:
                obj = call_json(self.core.read_namespaced_secret, name, self.namespace)
        except ApiException as error:
            if error.status == HTTP_NOT_FOUND and source.get("optional"):
                return []
            raise VolumeNotReadyError(f"{kind} {self.namespace}/{name}: {error.reason}") from error
        return _object_files(
            obj, encoded=kind == "secret", items=source.get("items"), default_mode=mode
        )

    def _write_projection(self, directory: Path, projection: dict[str, Any], mode: int) -> None:
        token = projection.get("serviceAccountToken")
        if token is not None:
            _write_file(directory, token["path"], self._token(token).encode("utf-8"), mode)
            return
        for kind in ("configMap", "secret", "downwardAPI"):
            if kind in projection:
                for path, content, file_mode in self._files(kind, projection[kind], mode):
                    _write_file(directory, path, content, file_mode)

    def _token(self, projection: dict[str, Any]) -> str:
        metadata = self.pod["metadata"]
        audiences = [projection["audience"]] if projection.get("audience") else None
        request = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(
                audiences=audiences,
                expiration_seconds=projection.get("expirationSeconds", DEFAULT_TOKEN_SECONDS),
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
        return str(response.status.token)

    def _field(self, item: dict[str, Any]) -> bytes:
        field_path = (item.get("fieldRef") or {}).get("fieldPath", "")
        metadata = self.pod["metadata"]
        simple = {"metadata.name": "name", "metadata.namespace": "namespace", "metadata.uid": "uid"}
        if field_path in simple:
            return str(metadata[simple[field_path]]).encode("utf-8")
        if field_path in ("metadata.labels", "metadata.annotations"):
            values = metadata.get(field_path.split(".")[1]) or {}
            return "\n".join(f'{k}="{v}"' for k, v in sorted(values.items())).encode("utf-8")
        return b""
