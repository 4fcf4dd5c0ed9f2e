"""The local registry starts even when the port the cluster picked for it was taken meanwhile
(another process on the machine bound it between the pick and the start): a cluster with real
nodes once failed to start on "address already in use"."""

from __future__ import annotations

import socket
import urllib.request
from pathlib import Path

import pytest

from localcluster.local_registry import LocalRegistry
from localcluster.node_binaries import locate_node_binaries

pytestmark = pytest.mark.realnode


def test_a_registry_whose_port_was_taken_starts_on_another(tmp_path: Path) -> None:
    binaries = locate_node_binaries()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        registry = LocalRegistry(
            binaries.registry, binaries.skopeo, tmp_path / "registry", port, tmp_path / "logs"
        )
        try:
            registry.start()
            assert registry.port != port
            with urllib.request.urlopen(f"http://{registry.address}/v2/", timeout=5) as answer:
                assert answer.status == 200
            log = (tmp_path / "logs" / "docker-registry.log").read_text()
            assert "address already in use" in log, "the first start did not meet the taken port"
        finally:
            registry.stop()
