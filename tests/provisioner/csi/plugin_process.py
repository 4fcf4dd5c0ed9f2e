"""The node plugin run as its own process (`python -m provisioner.csi`) on a temporary socket,
with a config.json whose one base path is a temporary directory; and a client for it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import grpc
from google.protobuf.message import Message

from provisioner.configuration.config import DEFAULT_NODE
from provisioner.csi.generated import csi_pb2

NODE_NAME = "csi-test-node"
REPOSITORY = Path(__file__).resolve().parents[3]


def require_root() -> None:
    """Bind mounts need CAP_SYS_ADMIN: without it the tests fail, saying so, never skip."""
    assert os.geteuid() == 0, "the CSI node plugin tests bind-mount: run them as root"


@dataclass
class PluginProcess:
    socket: Path
    base_path: Path
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def endpoint(self) -> str:
        return f"unix://{self.socket}"


def free_port() -> int:
    """A TCP port free on loopback now (for the plugin's --health-port)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def healthz(port: int) -> tuple[int, str]:
    """The plugin's /healthz on `port`: (status, body); status 0 while nothing listens yet."""
    url = f"http://127.0.0.1:{port}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except urllib.error.URLError as error:
        return 0, str(error.reason)


def write_config(path: Path, base_path: Path, *, mount_point: bool) -> None:
    entry: object = {"path": str(base_path), "mountPoint": True} if mount_point else str(base_path)
    config = {"nodePathMap": [{"node": DEFAULT_NODE, "paths": [entry]}]}
    path.write_text(json.dumps(config), encoding="utf-8")


@contextmanager
def plugin_process(
    directory: Path,
    base_path: Path | None = None,
    *,
    mount_point: bool = False,
    flags: Sequence[str] = (),
) -> Iterator[PluginProcess]:
    """Starts the plugin and waits until its socket answers; stops it (SIGTERM) after.
    `mount_point`: config.json says a filesystem must be mounted at the base path; `flags`:
    more of the plugin's command line."""
    directory.mkdir(parents=True, exist_ok=True)
    base = base_path or directory / "base"
    base.mkdir(parents=True, exist_ok=True)
    config = directory / "config.json"
    write_config(config, base, mount_point=mount_point)
    socket = directory / "csi.sock"
    log = directory / "plugin.log"
    with log.open("ab") as output:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "provisioner.csi",
                f"--endpoint=unix://{socket}",
                f"--node-name={NODE_NAME}",
                f"--config-file={config}",
                *flags,
            ],
            cwd=REPOSITORY,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    plugin = PluginProcess(socket, base, process, log)
    try:
        wait_until_serving(plugin)
        yield plugin
    finally:
        process.terminate()
        process.wait(timeout=30)


def wait_until_serving(plugin: PluginProcess, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if plugin.process.poll() is not None:
            raise AssertionError(f"the plugin exited: {plugin.log.read_text()}")
        if plugin.socket.exists():
            with grpc.insecure_channel(plugin.endpoint) as channel:
                try:
                    grpc.channel_ready_future(channel).result(timeout=1)
                except grpc.FutureTimeoutError:
                    continue
                return
        time.sleep(0.1)
    raise AssertionError(f"the plugin did not serve within {timeout} s: {plugin.log.read_text()}")


MessageT = TypeVar("MessageT", bound=Message)


def _serialize(message: Message) -> bytes:
    return message.SerializeToString()


def call(endpoint: str, method: str, request: Message, response_type: type[MessageT]) -> MessageT:
    """One unary call of the plugin (method: 'Node/NodePublishVolume', 'Identity/Probe')."""
    with grpc.insecure_channel(endpoint) as channel:
        stub: grpc.UnaryUnaryMultiCallable[Message, MessageT] = channel.unary_unary(
            f"/csi.v1.{method}",
            request_serializer=_serialize,
            response_deserializer=response_type.FromString,
        )
        return stub(request, timeout=30)


def mount_capability(
    *,
    block: bool = False,
    mode: csi_pb2.VolumeCapability.AccessMode.Mode = (
        csi_pb2.VolumeCapability.AccessMode.SINGLE_NODE_WRITER
    ),
) -> csi_pb2.VolumeCapability:
    access = csi_pb2.VolumeCapability.AccessMode(mode=mode)
    if block:
        return csi_pb2.VolumeCapability(
            block=csi_pb2.VolumeCapability.BlockVolume(), access_mode=access
        )
    return csi_pb2.VolumeCapability(
        mount=csi_pb2.VolumeCapability.MountVolume(), access_mode=access
    )
