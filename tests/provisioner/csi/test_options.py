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


def test_a_kubelet_root_gives_the_registration_socket_and_the_endpoint_the_kubelet_dials() -> None:
    options = parse_node_plugin_options(
        [
            "--endpoint=unix:///csi/csi.sock",
            "--kubelet-root=/var/lib/kubelet",
            "--kubelet-registration-path=/var/lib/kubelet/plugins/d/csi.sock",
            "--health-port=9808",
        ],
        {"NODE_NAME": "n"},
    )
    assert options.registration_socket == Path(
        "/var/lib/kubelet/plugins_registry/local-path.local-path-storage.io-reg.sock"
    )
    assert options.kubelet_endpoint == Path("/var/lib/kubelet/plugins/d/csi.sock")
    assert options.health_port == 9808
    plain = parse_node_plugin_options(["--endpoint=unix:///csi/csi.sock"], {"NODE_NAME": "n"})
    assert (plain.registration_socket, plain.health_port) == (None, None)
    assert plain.kubelet_endpoint == Path("/csi/csi.sock")


@pytest.mark.parametrize(
    ("flag", "says"),
    [
        ("--kubelet-root=var/lib/kubelet", "--kubelet-root 'var/lib/kubelet' must be an absolute"),
        ("--kubelet-registration-path=csi.sock", "must be an absolute path"),
        ("--health-port=http", "--health-port 'http' must be a TCP port"),
        ("--health-port=70000", "1-65535"),
        ("--kubelet-root=/" + "k" * 80, "--kubelet-root: the socket .* is longer than"),
        ("--endpoint=unix:///" + "e" * 110, r"--endpoint: the socket .* \(107 bytes\)"),
    ],
)
def test_registration_and_health_flags_the_plugin_cannot_use_are_refused(
    flag: str, says: str
) -> None:
    with pytest.raises(NodePluginOptionsError, match=says):
        parse_node_plugin_options([flag], {"NODE_NAME": "n"})


def test_managed_volumes_keep_their_locks_on_the_host_by_the_kubelet_or_where_told() -> None:
    base = ["--node-name", "n1", "--manage-volumes"]
    by_kubelet = parse_node_plugin_options([*base, "--kubelet-root", "/var/lib/kubelet"], {})
    assert by_kubelet.manage_volumes
    assert by_kubelet.state_dir == Path(f"/var/lib/kubelet/plugins/{by_kubelet.driver_name}")
    told = parse_node_plugin_options(base, {"STATE_DIR": "/var/lib/lps"})
    assert told.state_dir == Path("/var/lib/lps")
    assert parse_node_plugin_options(["--node-name", "n1"], {}).state_dir is None
    with pytest.raises(NodePluginOptionsError, match="--state-dir or --kubelet-root"):
        parse_node_plugin_options(base, {})
