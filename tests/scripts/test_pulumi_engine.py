"""Finding the Pulumi engine: `pulumi` on PATH first, else the bundle (checksums verified,
unpacked once into the cache, the provider installed as a plugin); one error naming both ways
when neither is there."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from scripts import pulumi_engine
from scripts.pulumi_engine import EngineUnavailableError, find_engine, pinned_versions


@pytest.fixture
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An empty cache and a PATH without pulumi."""
    monkeypatch.setenv("LPS_CACHE_DIR", str(tmp_path / "cache"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return tmp_path


def test_neither_path_nor_bundle_is_one_error_naming_both_ways(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(pulumi_engine.BUNDLE_VARIABLE, str(isolated / "no-bundle"))
    with pytest.raises(EngineUnavailableError) as caught:
        find_engine()
    message = str(caught.value)
    assert "no `pulumi` on PATH" in message
    assert pulumi_engine.INSTALL_HINT in message
    assert f"set {pulumi_engine.BUNDLE_VARIABLE}" in message
    assert "\n" not in message


def test_a_damaged_bundle_is_refused_and_nothing_is_installed(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = isolated / "bundle"
    shutil.copytree(pulumi_engine.DEFAULT_BUNDLE, bundle)
    cli_version, _ = pinned_versions()
    archive = bundle / f"pulumi-{cli_version}-linux-x64.tar.xz"
    with archive.open("r+b") as stream:
        stream.seek(1000)
        stream.write(b"\0damaged\0")
    monkeypatch.setenv(pulumi_engine.BUNDLE_VARIABLE, str(bundle))
    with pytest.raises(EngineUnavailableError, match="does not match its SHA256SUMS entry"):
        find_engine()
    assert not list((isolated / "cache" / "pulumi").glob("engine-*/.complete"))


def test_the_bundle_is_unpacked_once_with_its_provider_as_a_plugin(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(pulumi_engine.BUNDLE_VARIABLE, str(pulumi_engine.DEFAULT_BUNDLE))
    cli_version, provider_version = pinned_versions()
    engine = find_engine()
    assert engine.origin.startswith("bundle ")
    assert engine.version() == cli_version
    assert (engine.home / "plugins" / f"resource-kubernetes-{provider_version}").is_dir()
    # TypeScript programs (the package's consumers) need the Node.js host beside the CLI.
    assert (engine.root / "bin" / "pulumi-language-nodejs").is_file()
    environment = engine.environment()
    assert environment["PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION"] == "true"
    assert environment["PATH"].startswith(f"{engine.root / 'bin'}:")
    assert "PULUMI_BACKEND_URL" not in environment
    assert "TMPDIR" not in environment, "the caller's temporary directory unless told"
    # The Kubernetes provider leaves a kubeconfig copy in TMPDIR at every run: a run told where
    # keeps it there, out of the machine's /tmp.
    scratch = isolated / "scratch" / "tmp"
    assert engine.environment(temp_dir=scratch)["TMPDIR"] == str(scratch)
    assert scratch.is_dir()
    marker = next((isolated / "cache" / "pulumi").glob("engine-*/.complete"))
    stamp = marker.stat().st_mtime_ns
    assert find_engine().root == engine.root
    assert marker.stat().st_mtime_ns == stamp  # the second call unpacked nothing


def test_pulumi_on_path_comes_first(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(pulumi_engine.BUNDLE_VARIABLE, str(isolated / "no-bundle"))
    user_install = isolated / "user-pulumi" / "bin"
    user_install.mkdir(parents=True)
    fake = user_install / "pulumi"
    fake.write_text("#!/bin/sh\necho v3.300.0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{user_install}:/usr/bin:/bin")
    engine = find_engine()
    assert engine.origin == "PATH"
    assert engine.cli == fake
    assert engine.version() == "v3.300.0"
    # Without the bundle's provider the user's engine may download plugins as usual.
    assert "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION" not in engine.environment()


def test_missing_node_without_root_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    with pytest.raises(EngineUnavailableError) as raised:
        pulumi_engine.ensure_node()
    message = str(raised.value)
    assert message.startswith("node and npm not found: install Node.js 20 or newer with npm")
    assert "\n" not in message
