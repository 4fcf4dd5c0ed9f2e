"""The plugin registers itself with the kubelet from its own process, and /healthz says whether
it can be used: these tests play the kubelet's plugin watcher on the registration socket."""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf.message import Message

from provisioner.csi.generated import pluginregistration_pb2
from tests.provisioner.csi.plugin_process import (
    REPOSITORY,
    PluginProcess,
    free_port,
    healthz,
    plugin_process,
    require_root,
    write_config,
)

pytestmark = pytest.mark.csi

DRIVER = "local-path.local-path-storage.io"
KUBELET_ENDPOINT = "/var/lib/kubelet/plugins/local-path.local-path-storage.io/csi.sock"


def _serialize(message: Message) -> bytes:
    return message.SerializeToString()


class Registered:
    def __init__(self, plugin: PluginProcess, kubelet_root: Path, port: int) -> None:
        self.plugin = plugin
        self.socket = kubelet_root / "plugins_registry" / f"{DRIVER}-reg.sock"
        self.port = port

    def call(self, method: str, request: Message, response_type: type[Message]) -> Message:
        with grpc.insecure_channel(f"unix://{self.socket}") as channel:
            stub = channel.unary_unary(
                f"/pluginregistration.Registration/{method}",
                request_serializer=_serialize,
                response_deserializer=response_type.FromString,
            )
            response: Message = stub(request, timeout=10)
            return response

    def healthz(self) -> tuple[int, str]:
        return healthz(self.port)


@pytest.fixture
def registered(tmp_path: Path) -> Iterator[Registered]:
    require_root()
    # A unix socket's path is at most 107 bytes: pytest's tmp_path and the driver's name
    # together are longer.
    with tempfile.TemporaryDirectory(prefix="kubelet-") as short:
        yield from _registered(tmp_path, Path(short))


def _registered(tmp_path: Path, kubelet_root: Path) -> Iterator[Registered]:
    port = free_port()
    flags = (
        f"--kubelet-root={kubelet_root}",
        f"--kubelet-registration-path={KUBELET_ENDPOINT}",
        f"--health-port={port}",
    )
    with plugin_process(tmp_path / "plugin", flags=flags) as plugin:
        registered = Registered(plugin, kubelet_root, port)
        # The CSI socket answers first; the registration socket follows it.
        deadline = time.monotonic() + 10
        while not registered.socket.is_socket():
            alive = plugin.process.poll() is None and time.monotonic() < deadline
            assert alive, plugin.log.read_text()
            time.sleep(0.05)
        yield registered


def test_get_info_names_a_csi_plugin_its_driver_and_the_endpoint_the_kubelet_dials(
    registered: Registered,
) -> None:
    assert registered.socket.stat().st_mode & 0o077 == 0
    info = registered.call(
        "GetInfo", pluginregistration_pb2.InfoRequest(), pluginregistration_pb2.PluginInfo
    )
    assert info == pluginregistration_pb2.PluginInfo(
        type="CSIPlugin", name=DRIVER, endpoint=KUBELET_ENDPOINT, supported_versions=["1.0.0"]
    )


def test_healthz_fails_once_the_kubelet_refuses_the_registration(registered: Registered) -> None:
    assert registered.healthz() == (200, "ok\n")
    registered.call(
        "NotifyRegistrationStatus",
        pluginregistration_pb2.RegistrationStatus(
            plugin_registered=False, error="driver name already taken"
        ),
        pluginregistration_pb2.RegistrationStatusResponse,
    )
    status, reason = registered.healthz()
    assert (status, reason) == (
        500,
        "the kubelet refused the registration: driver name already taken\n",
    )
    assert "the kubelet refused to register" in registered.plugin.log.read_text()


def test_healthz_fails_when_the_csi_socket_no_longer_answers(registered: Registered) -> None:
    registered.plugin.socket.unlink()
    status, reason = registered.healthz()
    assert status == 500
    assert reason.startswith(f"Probe on {registered.plugin.socket} failed: UNAVAILABLE")


def test_a_stopped_plugin_leaves_no_registration_socket(registered: Registered) -> None:
    registered.plugin.process.terminate()
    assert registered.plugin.process.wait(timeout=30) == 0
    assert not registered.socket.exists()


def run_plugin_expecting_failure(tmp_path: Path, *flags: str) -> str:
    """Runs the plugin with `flags`; asserts it exits 1, and returns what it printed."""
    config = tmp_path / "config.json"
    write_config(config, tmp_path, mount_point=False)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "provisioner.csi",
            f"--endpoint=unix://{tmp_path}/csi.sock",
            "--node-name=n",
            f"--config-file={config}",
            *flags,
        ],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    return done.stderr


def test_a_kubelet_root_where_no_socket_can_be_made_stops_the_plugin_saying_so(
    tmp_path: Path,
) -> None:
    require_root()
    # Short, so that the socket's path is within a unix socket's 107 bytes.
    with tempfile.TemporaryDirectory(prefix="kubelet-") as short:
        root = Path(short) / "file"
        root.write_text("")
        said = run_plugin_expecting_failure(tmp_path, f"--kubelet-root={root}")
    assert f"cannot make the socket's directory {root}/plugins_registry: Not a directory" in said
    assert "Traceback" not in said


def test_a_health_port_already_taken_stops_the_plugin_before_it_serves(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        said = run_plugin_expecting_failure(tmp_path, f"--health-port={port}")
    assert f"cannot serve /healthz on port {port}: Address already in use" in said
    assert not (tmp_path / "csi.sock").exists()
