"""The node plugin's command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner.csi.options import NodePluginOptionsError, parse_node_plugin_options


def test_flags_and_environment_give_the_socket_driver_node_and_topology() -> None:
    options = parse_node_plugin_options(
        ["--endpoint=unix:///csi/csi.sock"], {"NODE_NAME": "node-1", "CONFIG_PATH": "/c.json"}
    )
    assert options.socket_path == Path("/csi/csi.sock")
    assert options.driver_name == "local-path.local-path-storage.io"
    assert options.config_file == Path("/c.json")
    assert (options.topology_key, options.topology_value) == ("kubernetes.io/hostname", "node-1")
    named = parse_node_plugin_options(["--provisioner-name=example.com/fast"], {"NODE_NAME": "n"})
    assert named.driver_name == "fast.example.com"


@pytest.mark.parametrize(
    ("argv", "environment", "says"),
    [
        (["--endpoint=tcp://0:10000"], {"NODE_NAME": "n"}, "unix:///"),
        ([], {}, "--node-name"),
        (["--topology-key=topology.example.com/rack"], {"NODE_NAME": "n"}, "--topology-value"),
        (["--provisioner-name=bad_name/x"], {"NODE_NAME": "n"}, "DNS subdomain"),
    ],
)
def test_a_command_line_the_plugin_cannot_serve_is_refused_saying_why(
    argv: list[str], environment: dict[str, str], says: str
) -> None:
    with pytest.raises(NodePluginOptionsError, match=says):
        parse_node_plugin_options(argv, environment)
