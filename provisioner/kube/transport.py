"""The one way requests reach the API server: `RateLimitedApiClient.call_api`.

Every request, ours (plain JSON, raw lists and watches) and the generated client's typed calls
alike, takes a token from one bucket, carries the credentials' Authorization header and our user
agent, and goes over one urllib3 pool set up for the server's TLS (the leader election alone has
a client of its own, `dedicated`: its bucket and connections, and no retries). It is a few dozen
lines of urllib3, so start-up never imports the kubernetes package (see `credentials`); the typed
API objects are built on it when first used (`KubeClients.core`, ...).
"""

from __future__ import annotations

import contextlib
import os
import ssl
import tempfile
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

import urllib3
from urllib3.util.ssl_ import create_urllib3_context

from provisioner.kube.credentials import Credentials
from provisioner.kube.rate_limit import TokenBucket

Timeout = float | tuple[float, float]


class Pool(Protocol):
    """The part of urllib3.PoolManager used here (tests substitute a fake)."""

    def request(
        self,
        method: str,
        url: str,
        *,
        body: bytes | str | None,
        headers: Mapping[str, str],
        timeout: urllib3.Timeout | None,
        preload_content: bool,
    ) -> Any: ...

    def clear(self) -> None: ...


class RateLimitedApiClient:
    def __init__(
        self,
        configuration: Credentials,
        bucket: TokenBucket,
        *,
        user_agent: str,
        pool_size: int = 10,
        pool: Pool | None = None,
    ) -> None:
        self.configuration = configuration
        self.user_agent = user_agent
        self._bucket = bucket
        self._spare = threading.local()
        self._pool = pool if pool is not None else connection_pool(configuration, pool_size)

    def call_api(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str] | None = None,
        body: bytes | str | None = None,
        timeout: Timeout | urllib3.Timeout | None = None,
    ) -> Any:
        """Send one request to the full `url` and return the urllib3 response, unread, whatever
        its status. Connection and TLS failures raise urllib3's errors (after its retries)."""
        if getattr(self._spare, "on", False):
            self._bucket.acquire_spare()
        else:
            self._bucket.acquire()
        sent = dict(headers or {})
        sent.setdefault("User-Agent", self.user_agent)
        authorization = self.configuration.authorization.header()
        if authorization is not None:
            sent["Authorization"] = authorization
        return self._pool.request(
            method, url, body=body, headers=sent, timeout=_timeout(timeout), preload_content=False
        )

    @contextlib.contextmanager
    def spare_capacity(self) -> Iterator[None]:
        """This thread's requests meanwhile use only the rate the others leave (see
        `TokenBucket.acquire_spare`)."""
        self._spare.on = True
        try:
            yield
        finally:
            self._spare.on = False

    def dedicated(self, *, user_agent: str, pool_size: int) -> RateLimitedApiClient:
        """A client on the same credentials with a bucket (same rate) and connections of its own
        and no retries: for requests that must neither wait behind the rest of the work for a
        token nor a connection, nor last longer than the timeout they were given. urllib3's
        default (3 retries) would repeat a GET or PUT after a read timeout or a reset, each with
        the whole timeout again."""
        return RateLimitedApiClient(
            self.configuration,
            self._bucket.twin(),
            user_agent=user_agent,
            pool=connection_pool(self.configuration, pool_size, retries=False),
        )

    def close(self) -> None:
        self._pool.clear()


def _timeout(timeout: Timeout | urllib3.Timeout | None) -> urllib3.Timeout | None:
    if timeout is None or isinstance(timeout, urllib3.Timeout):
        return timeout
    if isinstance(timeout, tuple):
        return urllib3.Timeout(connect=timeout[0], read=timeout[1])
    return urllib3.Timeout(total=timeout)


def connection_pool(credentials: Credentials, size: int, *, retries: bool = True) -> Pool:
    """A pool for the server: its CA (or the system's), the client certificate, the TLS name
    to verify, through the kubeconfig's proxy if any; `size` connections kept per host.
    Retries are only for failures before the request was sent (connecting): urllib3's default
    would also send a GET, PUT or DELETE again after a read timeout or a reset, when the server
    may have applied the first one, so our own PUT came back as a 409 conflict and our own
    DELETE as a 404, and a request lasted up to four times its timeout. A failure after sending
    raises; the caller's retry (requeue with backoff) reads the state again first.
    `retries=False`: any failure raises at once."""
    settings: dict[str, Any] = {
        "maxsize": size,
        "retries": urllib3.Retry(total=3, read=0, other=0) if retries else False,
    }
    if credentials.host.startswith("https"):
        settings.update(
            ssl_context=tls_context(credentials),
            cert_reqs="CERT_REQUIRED" if credentials.verify else "CERT_NONE",
        )
        if credentials.tls_server_name:
            settings["server_hostname"] = credentials.tls_server_name
    if credentials.proxy:
        if credentials.proxy.split("://", 1)[0].lower().startswith("socks"):
            from urllib3.contrib.socks import SOCKSProxyManager  # noqa: PLC0415 (rare)

            return SOCKSProxyManager(credentials.proxy, **settings)
        return urllib3.ProxyManager(credentials.proxy, **settings)
    return urllib3.PoolManager(**settings)


def tls_context(credentials: Credentials) -> ssl.SSLContext:
    """The server's CA (file or data; the system's when neither) and our client certificate.
    Certificate data is written to a private temporary file only while it is loaded: the ssl
    module reads certificates from files only."""
    verify = ssl.CERT_REQUIRED if credentials.verify else ssl.CERT_NONE
    context = create_urllib3_context(cert_reqs=verify)
    if credentials.verify:
        if credentials.ca_file or credentials.ca_data:
            context.load_verify_locations(cafile=credentials.ca_file, cadata=credentials.ca_data)
        else:
            context.load_default_certs()
    cert, key = credentials.cert_data, credentials.key_data
    if credentials.cert_file or cert:
        with (
            _as_file(cert, credentials.cert_file) as cert_file,
            _as_file(key, credentials.key_file) as key_file,
        ):
            context.load_cert_chain(cert_file, key_file)
    return context


@contextlib.contextmanager
def _as_file(data: bytes | None, path: str | None) -> Iterator[Any]:
    if data is None:
        yield path
        return
    descriptor, name = tempfile.mkstemp(prefix="kube-credential-")
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
        yield name
    finally:
        Path(name).unlink(missing_ok=True)
