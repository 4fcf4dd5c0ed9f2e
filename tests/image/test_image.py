"""The provisioner's image as a user would run it: built by `make image` (scripts/build_image.py,
cached, so only the first run builds), read back by umoci and skopeo rather than by the code that
wrote it, and started from its own root filesystem as its config says (uid 65532, its
entrypoint), never from the host's virtualenv. If the image lacks a library, a module or a file
the provisioner needs, the start below fails.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from components import naming
from components.args import ConfigMapFiles, ProvisionerDeploymentArgs
from components.deployment import (
    CONTAINER_NAME,
    RUN_AS_USER,
    pod_template,
    provisioner_arguments,
)
from localcluster import LocalCluster
from localcluster.ports import pick_free_ports
from localcluster.raw_api import manifest
from provisioner.configuration.config import (
    DEFAULT_HELPER_POD_YAML,
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
)
from provisioner.node_volumes.volume_steps import GNU_CP
from scripts.build_image import (
    DEBIAN_PACKAGES,
    ENTRYPOINT,
    KEPT_EXECUTABLES,
    PYTHON,
    REPOSITORY,
    BuiltImage,
    image,
)
from tests.provisioner.e2e.support import (
    ConfigFiles,
    ProvisionerProcess,
    ProvisionerSetup,
    volume_node,
    volume_path,
    wait_gone,
)

pytestmark = pytest.mark.image

# What a pod of this image must never be able to run: a shell, a package manager, an archiver
# (kubectl cp), a compiler or pip.
FORBIDDEN = (
    "bin/sh",
    "usr/bin/sh",
    "bin/bash",
    "usr/bin/bash",
    "bin/dash",
    "usr/bin/dpkg",
    "usr/bin/apt",
    "usr/bin/apt-get",
    "bin/tar",
    "usr/bin/tar",
    "usr/bin/perl",
    "usr/bin/gcc",
    "usr/bin/cc",
    "usr/local/bin/pip",
    "usr/lib/python3.11/ensurepip",
    "usr/local/lib/python3.11/dist-packages/pip",
    "usr/local/lib/python3.11/dist-packages/setuptools",
    "var/lib/dpkg",
)
# Resolved on the host: the process gets the image's PATH, which the host's chroot is not on.
CHROOT = shutil.which("chroot") or "/usr/sbin/chroot"
BIN_DIRECTORIES = ("bin", "sbin", "usr/bin", "usr/sbin", "usr/local/bin", "usr/local/sbin")

# The Deployment's pod needs a ConfigMap's files to be built; these are valid, and unused here.
PLACEHOLDER_FILES = ConfigMapFiles(
    json.dumps({"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": ["/x"]}]}),
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
    DEFAULT_HELPER_POD_YAML,
)


@pytest.fixture(scope="session")
def built() -> BuiltImage:
    return image()


@pytest.fixture(scope="session")
def bundle(built: BuiltImage, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The image unpacked by umoci, as a runtime does: a root filesystem and the runtime spec
    (user, args, env) umoci derives from the image's config."""
    destination = tmp_path_factory.mktemp("image") / "bundle"
    subprocess.run(
        ["umoci", "unpack", "--image", f"{built.layout}:{built.tag}", str(destination)],
        check=True,
        capture_output=True,
    )
    return destination


@pytest.fixture(scope="session")
def spec(bundle: Path) -> dict[str, Any]:
    return dict(json.loads((bundle / "config.json").read_text(encoding="utf-8"))["process"])


def run_in_image(rootfs: Path, spec: dict[str, Any], arguments: list[str]) -> list[str]:
    """The command that runs the image's process in its root filesystem as its user."""
    user = spec["user"]
    return [
        CHROOT,
        f"--userspec={user['uid']}:{user['gid']}",
        str(rootfs),
        *spec["args"],
        *arguments,
    ]


def image_env(spec: dict[str, Any], **extra: str) -> dict[str, str]:
    env = dict(item.split("=", 1) for item in spec["env"])
    return {**env, **extra}


def run_from_image(
    bundle: Path, spec: dict[str, Any], arguments: list[str]
) -> subprocess.CompletedProcess[str]:
    """The image's process with these arguments, to its end, with its environment."""
    return subprocess.run(
        run_in_image(bundle / "rootfs", spec, arguments),
        env=image_env(spec),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_archive_is_the_layout_a_registry_would_get(built: BuiltImage) -> None:
    """skopeo (what pushes it) reads the archive and sees the build's digest and config."""
    inspected = json.loads(
        subprocess.run(
            ["skopeo", "inspect", f"oci-archive:{built.archive}"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    assert inspected["Digest"] == built.digest
    config = json.loads(
        subprocess.run(
            ["skopeo", "inspect", "--config", f"oci-archive:{built.archive}"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )["config"]
    assert config["User"] == f"{RUN_AS_USER}:{RUN_AS_USER}"
    assert config["Entrypoint"] == [ENTRYPOINT]


def test_runs_the_deployments_command_as_non_root(spec: dict[str, Any]) -> None:
    """The runtime spec umoci derives: the Deployment's uid and command (components/)."""
    files = PLACEHOLDER_FILES
    template: Any = pod_template(ProvisionerDeploymentArgs(config_files=files), "lps")
    container = next(c for c in template["spec"]["containers"] if c["name"] == CONTAINER_NAME)
    assert spec["user"]["uid"] == RUN_AS_USER
    assert spec["user"]["gid"] == RUN_AS_USER
    assert spec["args"] == container["command"]


def test_no_shell_package_manager_or_build_tools(bundle: Path) -> None:
    rootfs = bundle / "rootfs"
    present = [
        path for path in FORBIDDEN if (rootfs / path).exists() or (rootfs / path).is_symlink()
    ]
    assert present == []
    executables = sorted(
        str(entry.relative_to(rootfs))
        for directory in BIN_DIRECTORIES
        if (rootfs / directory).is_dir()
        for entry in (rootfs / directory).iterdir()
    )
    assert executables == sorted(KEPT_EXECUTABLES)


def test_nothing_in_the_image_is_writable_by_its_user(bundle: Path) -> None:
    """Only /tmp and the user's home: the code and the interpreter cannot be changed at run
    time (the bytecode is compiled in, so Python never needs to write it)."""
    rootfs = bundle / "rootfs"
    writable = []
    for directory, _, files in os.walk(rootfs):
        for name in [".", *files]:
            path = Path(directory) / name
            status = path.lstat()
            if stat.S_ISLNK(status.st_mode):
                continue
            if status.st_uid == RUN_AS_USER or status.st_mode & stat.S_IWOTH:
                writable.append(str(path.resolve().relative_to(rootfs)))
    assert sorted(writable) == ["home/nonroot", "tmp"]


def test_help_runs_from_the_image_root(bundle: Path, spec: dict[str, Any]) -> None:
    """The image's own interpreter and packages, nothing from the host."""
    result = run_from_image(bundle, spec, ["--help"])
    assert result.returncode == 0, result.stderr
    assert "--provisioner-name" in result.stdout


def test_the_csi_node_plugin_runs_from_the_image_root(bundle: Path, spec: dict[str, Any]) -> None:
    """The DaemonSet's command: the entrypoint's csi-node-plugin, its gRPC extension's
    libraries (libstdc++) in the image."""
    result = run_from_image(bundle, spec, ["csi-node-plugin", "--help"])
    assert result.returncode == 0, result.stderr
    assert "--shell-directory" in result.stdout


@pytest.mark.parametrize(
    ("program", "says"), [("/usr/bin/bwrap", "bubblewrap"), (GNU_CP, "GNU coreutils")]
)
def test_the_node_plugin_s_programs_run_from_the_image_root(
    bundle: Path, spec: dict[str, Any], program: str, says: str
) -> None:
    """bwrap, which confines the node plugin's volume steps (it refuses to start without it),
    and GNU cp, which copies a clone's source and takes a snapshot: both in the image, with
    their libraries, at the very paths the steps run them by."""
    result = run_from_image(bundle, {**spec, "args": [program]}, ["--version"])
    assert result.returncode == 0, result.stderr
    assert says in result.stdout


def test_version_from_the_image_is_its_tag(
    built: BuiltImage, bundle: Path, spec: dict[str, Any]
) -> None:
    """The project's wheel carries its metadata into the image: --version reads it there."""
    result = run_from_image(bundle, spec, ["--version"])
    assert (result.returncode, result.stdout) == (0, f"{ENTRYPOINT} {built.tag}\n"), result.stderr


# Asked of the image's own interpreter: the distributions it finds, and the versions its
# libraries report at run time, each under the Debian package that ships the library.
CONTENTS = """
import importlib.metadata, json, os, platform, pyexpat, re, sqlite3, ssl, zlib
number = lambda text: re.search(r"[0-9]+(?:[.][0-9]+)+", text).group(0)
print(json.dumps({
    "wheels": sorted([d.metadata["Name"], d.version] for d in importlib.metadata.distributions()),
    "libraries": {
        "python3.11-minimal": platform.python_version(),
        "libc6": number(os.confstr("CS_GNU_LIBC_VERSION")),
        "libssl3": number(ssl.OPENSSL_VERSION),
        "libsqlite3-0": sqlite3.sqlite_version,
        "zlib1g": zlib.ZLIB_RUNTIME_VERSION,
        "libexpat1": number(pyexpat.EXPAT_VERSION),
    },
}))
"""


def upstream_version(debian_version: str) -> str:
    """`1:1.2.13.dfsg-1` -> `1.2.13`: no epoch, no Debian revision, no repack suffix."""
    without_epoch = debian_version.split(":", 1)[-1]
    upstream = without_epoch.rpartition("-")[0] or without_epoch
    match = re.match(r"[0-9]+(?:\.[0-9]+)*", upstream)
    assert match is not None, debian_version
    return match.group(0)


def test_upstream_version_of_debian_versions() -> None:
    assert upstream_version("1:1.2.13.dfsg-1") == "1.2.13"
    assert upstream_version("3.0.17-1~deb12u2") == "3.0.17"
    assert upstream_version("10.0.0") == "10.0.0"


def test_sbom_lists_the_images_packages(
    built: BuiltImage, bundle: Path, spec: dict[str, Any]
) -> None:
    """`make image`'s SBOM against the image itself: the same digest skopeo reads, exactly the
    wheels the image's interpreter finds, and the Debian packages whose libraries it runs at
    the versions they report."""
    document = json.loads(built.sbom.read_text(encoding="utf-8"))
    assert (document["bomFormat"], document["specVersion"]) == ("CycloneDX", "1.5")
    image_component = document["metadata"]["component"]
    assert (image_component["name"], image_component["version"]) == (REPOSITORY, built.tag)
    assert image_component["hashes"] == [
        {"alg": "SHA-256", "content": built.digest.removeprefix("sha256:")}
    ]
    wheels = sorted(
        [component["name"], component["version"]]
        for component in document["components"]
        if component["purl"].startswith("pkg:pypi/")
    )
    debian = {
        component["name"]: component["version"]
        for component in document["components"]
        if component["purl"].startswith("pkg:deb/debian/")
    }
    assert len(wheels) + len(debian) == len(document["components"])

    # The image's interpreter instead of its entrypoint, as its user, in its root.
    result = run_from_image(bundle, {**spec, "args": [PYTHON]}, ["-c", CONTENTS])
    assert result.returncode == 0, result.stderr
    contents = json.loads(result.stdout)
    assert wheels == contents["wheels"]
    assert ["local-path-storage", built.tag] in wheels
    assert set(DEBIAN_PACKAGES) <= set(debian)
    assert {
        package: upstream_version(debian[package]) for package in contents["libraries"]
    } == contents["libraries"]
    # Extracted, then dropped whole (it ships only documentation): not in the image, nor listed.
    assert "gcc-12-base" not in debian


@pytest.fixture
def setup(cluster: LocalCluster, tmp_path: Path) -> Iterator[ProvisionerSetup]:
    made = ProvisionerSetup(cluster, tmp_path / "setup", ConfigFiles())
    try:
        yield made
    finally:
        made.cleanup()


@pytest.mark.cluster
def test_image_provisioner_binds_and_removes_a_volume(
    cluster: LocalCluster,
    setup: ProvisionerSetup,
    bundle: Path,
    spec: dict[str, Any],
    tmp_path: Path,
) -> None:
    """The real start: the image's process, with the Deployment's flags, its config files where
    the ConfigMap is mounted, leads, binds a claim and removes the volume after release."""
    rootfs = bundle / "rootfs"
    config = rootfs / "etc" / "config"
    kubeconfig = rootfs / "etc" / "kubeconfig"
    try:
        shutil.copytree(setup.config_dir, config)
        shutil.copyfile(cluster.kubeconfig, kubeconfig)
        for path in [kubeconfig, *config.iterdir()]:
            path.chmod(0o644)
        start_and_bind(setup, rootfs, spec, tmp_path)
    finally:
        setup.stop_all()
        shutil.rmtree(config, ignore_errors=True)
        kubeconfig.unlink(missing_ok=True)


def start_and_bind(
    setup: ProvisionerSetup, rootfs: Path, spec: dict[str, Any], tmp_path: Path
) -> None:
    port = pick_free_ports(1)[0]
    deployment = ProvisionerDeploymentArgs(
        config_files=PLACEHOLDER_FILES,
        namespace=setup.namespace,
        provisioner_name=setup.name,
        metrics_port=port,
    )
    # The helper pods' account under the Deployment's name for it (the setup made its own).
    account = {"metadata": {"name": naming.HELPER_SERVICE_ACCOUNT}}
    setup.core.create_namespaced_service_account(
        setup.namespace, manifest({**account, "automountServiceAccountToken": False})
    )
    # The Deployment's flags; only the credentials differ: a pod has in-cluster ones.
    arguments = ["--kubeconfig=/etc/kubeconfig", *provisioner_arguments(deployment)]
    replica = ProvisionerProcess(
        run_in_image(rootfs, spec, arguments),
        image_env(spec, POD_NAMESPACE=setup.namespace),
        tmp_path / "provisioner.log",
        port,
    )
    setup.replicas.append(replica)
    setup.wait_ready(replica, timeout=120)
    # It is the image's process: its root is the image's, its user the image's.
    assert Path(f"/proc/{replica.pid}/root").resolve() == rootfs.resolve()
    status = Path(f"/proc/{replica.pid}/status").read_text(encoding="utf-8")
    uids = next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1:]
    assert uids == [str(RUN_AS_USER)] * 4

    storage_class = setup.create_class("image")
    setup.create_claim("data", storage_class)
    setup.create_consumer("data", "data")
    volume = setup.wait_bound("data")
    node, path = volume_node(volume), volume_path(volume)
    assert setup.node_path(node, path).is_dir()

    setup.core.delete_namespaced_pod("data", setup.namespace, grace_period_seconds=0)
    setup.core.delete_namespaced_persistent_volume_claim("data", setup.namespace)
    name = volume["metadata"]["name"]
    wait_gone(lambda: setup.volume(name), 60, f"{name} to be deleted")
    assert not setup.node_path(node, path).exists()
    assert replica.alive(), replica.log()[-3000:]
