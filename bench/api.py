"""A small JSON client for the local cluster's API, made for load: threads share one pool.

Why: the benchmark itself must not be the bottleneck it measures. The generated client turns
every response into typed models (seconds of CPU for thousands of objects, see the cost facts in
the shared guide); this sends and returns plain JSON over urllib3 with the admin certificate,
and names itself in the user agent so the audit log tells its requests apart.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import urllib3

from localcluster import LocalCluster

USER_AGENT = "lps-bench/1"
WATCH_READ_TIMEOUT_SECONDS = 60.0


class ApiError(Exception):
    """A non-2xx answer; `.status` is the HTTP status."""

    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body[:300]}")
        self.status = status


class RawApi:
    """Thread-safe: urllib3's pool hands each thread its own connection."""

    def __init__(
        self, server: str, ca_cert: Path, cert: Path, key: Path, pool_size: int = 32
    ) -> None:
        self.server = server.rstrip("/")
        self._pool = urllib3.PoolManager(
            num_pools=2,
            maxsize=pool_size,
            block=True,
            cert_reqs="CERT_REQUIRED",
            ca_certs=str(ca_cert),
            cert_file=str(cert),
            key_file=str(key),
            retries=False,
            timeout=urllib3.Timeout(connect=10.0, read=60.0),
        )

    @classmethod
    def for_cluster(cls, cluster: LocalCluster, pool_size: int = 32) -> RawApi:
        return cls(
            cluster.server, cluster.ca_cert, cluster.admin.cert, cluster.admin.key, pool_size
        )

    def _url(self, path: str, query: Mapping[str, str | int] | None) -> str:
        return self.server + path + (f"?{urlencode(query)}" if query else "")

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: Mapping[str, str | int] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body).encode()
        response = self._pool.request(method, self._url(path, query), body=data, headers=headers)
        if not 200 <= response.status < 300:
            raise ApiError(method, path, response.status, response.data.decode(errors="replace"))
        decoded: dict[str, Any] = json.loads(response.data) if response.data else {}
        return decoded

    def get(self, path: str, **query: str | int) -> dict[str, Any]:
        return self.request("GET", path, query=query or None)

    def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self.request("POST", path, body)

    def merge_patch(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self.request("PATCH", path, body, content_type="application/merge-patch+json")

    def delete(self, path: str, *, missing_ok: bool = True) -> None:
        try:
            self.request("DELETE", path)
        except ApiError as error:
            if not (missing_ok and error.status == 404):
                raise

    def list_all(self, path: str, **query: str | int) -> tuple[list[dict[str, Any]], str]:
        """Every item of a collection (pages of 500) and the list's resourceVersion."""
        items: list[dict[str, Any]] = []
        cont = ""
        while True:
            page = self.get(path, limit=500, **({"continue": cont} if cont else {}), **query)
            items.extend(page.get("items") or [])
            cont = page.get("metadata", {}).get("continue") or ""
            if not cont:
                return items, str(page["metadata"].get("resourceVersion", ""))

    def watch(
        self, path: str, resource_version: str, timeout_seconds: int, **query: str | int
    ) -> Iterator[dict[str, Any]]:
        """Watch events (dicts with `type` and `object`) until the server ends the watch."""
        url = self._url(
            path,
            {
                "watch": "true",
                "resourceVersion": resource_version,
                "allowWatchBookmarks": "true",
                "timeoutSeconds": timeout_seconds,
                **query,
            },
        )
        response = self._pool.request(
            "GET",
            url,
            headers={"Accept": "application/json", "User-Agent": USER_AGENT},
            preload_content=False,
            timeout=urllib3.Timeout(
                connect=10.0, read=timeout_seconds + WATCH_READ_TIMEOUT_SECONDS
            ),
        )
        try:
            if response.status != 200:
                raise ApiError(
                    "WATCH", path, response.status, response.read().decode(errors="replace")
                )
            pending = b""
            for chunk in response.stream(65536):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield json.loads(line)
        finally:
            response.release_conn()

    def close(self) -> None:
        self._pool.clear()
