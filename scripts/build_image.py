"""The provisioner's OCI image, built from packages only: no container daemon, no registry.

Why: the Deployment runs `local-path-storage/provisioner:<version>`; this is the recipe for it.
The root filesystem is Debian bookworm's Python 3.11 and the shared libraries it needs, unpacked
from their .deb files without running any maintainer script (mmdebstrap's `extract` variant), so
no shell or package tool is needed to build it and none is left in it. Into that go the pinned,
hash-checked wheels of scripts/image-requirements.txt and the project's own wheel, built from the
files git tracks. The layer, config, manifest and archive are written here directly, with sorted
entries, fixed owners and timestamps (SOURCE_DATE_EPOCH), so the same inputs give the same digest.

The result is cached outside the repository under a hash of its inputs (this file, the lock, the
package list, pyproject.toml and every tracked file of the provisioner package): a second build
with the same inputs builds nothing.

    python -m scripts.build_image            # build or reuse; prints the digest, size and paths
    python -m scripts.build_image --path     # the same, then only the cached directory on stdout
    python -m scripts.build_image --verify   # build again in a scratch directory, compare digests
"""

from __future__ import annotations

import argparse
import fcntl
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components import naming
from scripts import sbom
from scripts.pulumi_engine import cache_dir

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "scripts" / "image-requirements.txt"
REPOSITORY = naming.IMAGE_REPOSITORY
ENTRYPOINT = "local-path-storage-provisioner"
RUN_AS = 65532  # distroless' `nonroot`, the uid the Deployment runs as (components/deployment.py)
# Every file gets this mtime and the config this creation time: the image says nothing of when
# it was built, so two builds are byte for byte the same.
SOURCE_DATE_EPOCH = 0
DEBIAN_SUITE = "bookworm"
DEBIAN_DISTRO = "debian-12"  # the suite's release, as package URLs (the SBOM's) name it
ARCHITECTURE = "amd64"
DEBIAN_MIRRORS = (
    f"deb http://deb.debian.org/debian {DEBIAN_SUITE} main",
    f"deb http://deb.debian.org/debian {DEBIAN_SUITE}-updates main",
    f"deb http://deb.debian.org/debian-security {DEBIAN_SUITE}-security main",
)
# The interpreter and its full standard library (ssl, http, json, sqlite...); apt adds the
# shared libraries they link against.
DEBIAN_PACKAGES = (
    "python3.11-minimal",
    "libpython3.11-stdlib",
    "libstdc++6",
    "bubblewrap",
    "coreutils",
)
"""The interpreter and its library; libstdc++ for grpcio's extension (the CSI node plugin);
bubblewrap, which confines each of the node plugin's volume steps to its base path, and
coreutils for GNU `cp`, which copies a clone's source keeping what busybox's would not."""
PYTHON = "/usr/bin/python3.11"
SITE_PACKAGES = "usr/local/lib/python3.11/dist-packages"
APT_ARCHIVES = "var/cache/apt/archives"
# The build backend for the project's wheel (pyproject.toml [build-system]), pinned and
# hash-checked like the runtime's wheels, so its metadata files do not vary with the newest one.
BUILD_BACKEND = (
    "setuptools==80.9.0 "
    "--hash=sha256:062d34222ad13e0cc312a4c02d73f059e86a4acbfbdea8f8f76b28c99f306922"
)
WHEEL_PLATFORM = ("manylinux_2_36_x86_64", "manylinux_2_28_x86_64", "manylinux2014_x86_64")
# Executables the runtime keeps; every other file in a bin directory (tar, dpkg, the tools
# apt pulls in) goes, with the package databases and documentation.
KEPT_EXECUTABLES = {
    "usr/bin/python3.11",
    f"usr/local/bin/{ENTRYPOINT}",
    "usr/bin/bwrap",
    "bin/cp",
}
BIN_DIRECTORIES = ("bin", "sbin", "usr/bin", "usr/sbin", "usr/local/bin", "usr/local/sbin")
REMOVED = (
    "dev",
    "etc/apt",
    "etc/dpkg",
    "etc/alternatives",
    "etc/hostname",
    "etc/resolv.conf",
    "run",
    "tmp",
    "usr/lib/dpkg",
    "usr/share/doc",
    "usr/share/doc-base",
    "usr/share/info",
    "usr/share/lintian",
    "usr/share/locale",
    "usr/share/man",
    "usr/share/polkit-1",
    "var",
)
TOOLS = {"mmdebstrap": "mmdebstrap", "umoci": "umoci", "skopeo": "skopeo", "dpkg-deb": "dpkg"}
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"


class ImageBuildError(Exception):
    """A build step failed; the message says which, where its log is and what to do."""


@dataclass(frozen=True)
class BuiltImage:
    """A finished image in the cache: its OCI layout, the archive of it, and what it weighs."""

    directory: Path
    digest: str  # the manifest digest, what a registry shows and a pod spec can pin
    tag: str
    compressed_bytes: int  # config + layer blobs, what a pull transfers
    rootfs_bytes: int  # the unpacked root filesystem

    @property
    def layout(self) -> Path:
        return self.directory / "oci"

    @property
    def archive(self) -> Path:
        return self.directory / "provisioner.oci.tar"

    @property
    def sbom(self) -> Path:
        """The CycloneDX JSON of the image's Debian packages and wheels (scripts/sbom.py)."""
        return self.directory / "provisioner.cdx.json"

    @property
    def reference(self) -> str:
        return f"{REPOSITORY}:{self.tag}"

    def summary(self) -> dict[str, Any]:
        return {
            "reference": self.reference,
            "digest": self.digest,
            "compressed_bytes": self.compressed_bytes,
            "rootfs_bytes": self.rootfs_bytes,
        }

    @classmethod
    def load(cls, directory: Path) -> BuiltImage:
        summary = json.loads((directory / "image.json").read_text(encoding="utf-8"))
        return cls(
            directory=directory,
            digest=summary["digest"],
            tag=summary["reference"].rpartition(":")[2],
            compressed_bytes=summary["compressed_bytes"],
            rootfs_bytes=summary["rootfs_bytes"],
        )


def progress(message: str) -> None:
    print(f"image: {message}", file=sys.stderr, flush=True)


def project_version() -> str:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return str(pyproject["project"]["version"])


def tracked_package_files() -> list[Path]:
    """The provisioner package's files git tracks (a clean clone builds exactly these)."""
    try:
        listed = subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "-z", "--", "provisioner"],
            check=True,
            capture_output=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as error:
        raise ImageBuildError(
            f"cannot list the tracked files of {ROOT / 'provisioner'} ({error}): "
            "build the image from a git checkout of the project"
        ) from error
    return sorted(ROOT / name for name in listed.decode().split("\0") if name)


def input_key() -> str:
    """The hash of everything that goes into the image and its SBOM: the cache key."""
    digest = hashlib.sha256()
    own = [Path(__file__).resolve(), Path(sbom.__file__).resolve(), LOCK, ROOT / "pyproject.toml"]
    for path in [*own, *tracked_package_files()]:
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    digest.update(repr((DEBIAN_MIRRORS, DEBIAN_PACKAGES, BUILD_BACKEND, WHEEL_PLATFORM)).encode())
    return digest.hexdigest()[:16]


def check_lock_matches_pyproject() -> None:
    """Each runtime pin of pyproject.toml must be the lock's, or the image runs other versions."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    locked = {
        _normalise(line.split("==")[0]): line.split("==")[1].split()[0]
        for line in LOCK.read_text(encoding="utf-8").splitlines()
        if line and not line.startswith("#")
    }
    for requirement in pyproject["project"]["dependencies"]:
        name, _, version = requirement.partition("==")
        if locked.get(_normalise(name)) != version:
            raise ImageBuildError(
                f"pyproject.toml pins {requirement} but {LOCK.relative_to(ROOT)} has "
                f"{name}=={locked.get(_normalise(name), '(missing)')}: update the lock (the "
                "version and the sha256 of its cp311 manylinux x86_64 wheel)"
            )


def _normalise(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(".", "-")


def ensure_tools() -> None:
    """mmdebstrap builds the root filesystem; dpkg-deb reads its packages for the SBOM; umoci
    and skopeo check and push the result; chroot (coreutils) compiles the bytecode with the
    image's interpreter."""
    missing = sorted(package for tool, package in TOOLS.items() if shutil.which(tool) is None)
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise ImageBuildError(
            f"missing tools: {', '.join(missing)}: install the Debian packages of the same "
            f"names (apt-get install {' '.join(missing)})"
        )
    progress(f"installing the Debian packages {', '.join(missing)} (apt-get)")
    logs = cache_dir() / "logs"
    # A fresh machine may have no package lists yet: install alone would find nothing.
    run("apt-get-update", ["apt-get", "update", "-q"], logs)
    run("apt-get", ["apt-get", "install", "-y", "-q", *missing], logs)


def run(step: str, command: list[str], logs: Path, env: dict[str, str] | None = None) -> None:
    """Run quietly; on failure raise with the command, its log's path and the log's tail."""
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"image-{step}.log"
    with log.open("w", encoding="utf-8") as out:
        try:
            result = subprocess.run(
                command, stdout=out, stderr=subprocess.STDOUT, env=env, check=False
            )
        except OSError as error:
            raise ImageBuildError(f"{step}: cannot run {command[0]}: {error}") from error
    if result.returncode != 0:
        tail = "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-20:])
        raise ImageBuildError(
            f"{step} failed (exit {result.returncode}): {' '.join(command)}\n"
            f"full log: {log}\n{tail}"
        )


def build_root_filesystem(rootfs: Path, logs: Path) -> None:
    """Debian's interpreter and libraries, extracted only: no maintainer script runs. The
    downloaded .deb files are kept in the root's apt cache (which strip() removes) for the SBOM:
    with no dpkg database in the image, they are the record of what was extracted."""
    env = {**os.environ, "SOURCE_DATE_EPOCH": str(SOURCE_DATE_EPOCH)}
    command = [
        "mmdebstrap",
        "--variant=extract",
        "--mode=root",
        f"--include={','.join(DEBIAN_PACKAGES)}",
        "--skip=output/dev",
        "--skip=cleanup/apt/cache",
        DEBIAN_SUITE,
        str(rootfs),
        *DEBIAN_MIRRORS,
    ]
    run("debian", command, logs, env)


def install_python_packages(rootfs: Path, work: Path, logs: Path) -> None:
    """The locked wheels and the project's own wheel into the image's site-packages; the
    entrypoint written for the image's interpreter (pip's would name the build machine's)."""
    source = work / "source"
    for path in [ROOT / "pyproject.toml", *tracked_package_files()]:
        target = source / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    wheels = work / "wheels"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    backend = work / "backend"
    backend_lock = work / "backend.txt"
    backend_lock.write_text(BUILD_BACKEND + "\n", encoding="utf-8")
    run(
        "backend",
        [*pip, "install", "--target", str(backend), "--require-hashes", "-r", str(backend_lock)],
        logs,
    )
    # No build isolation: the pinned backend above builds it, nothing else is fetched for it.
    run(
        "wheel",
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(source)],
        logs,
        {**os.environ, "PYTHONPATH": str(backend)},
    )
    site = rootfs / SITE_PACKAGES
    platforms = [option for platform in WHEEL_PLATFORM for option in ("--platform", platform)]
    target_options = ["--target", str(site), "--no-compile", "--no-deps", "--only-binary=:all:"]
    abi = ["--python-version", "3.11", "--implementation", "cp", "--abi", "cp311"]
    run(
        "dependencies",
        [*pip, "install", *target_options, *platforms, *abi, "--require-hashes", "-r", str(LOCK)],
        logs,
    )
    run(
        "project", [*pip, "install", *target_options, *sorted(map(str, wheels.glob("*.whl")))], logs
    )
    forget_install_source(site)
    # pip's console scripts name this build's interpreter: the image gets its own.
    shutil.rmtree(site / "bin", ignore_errors=True)
    # kubernetes' asyncio client: never imported, its aiohttp stack is not in the lock.
    shutil.rmtree(site / "kubernetes" / "aio")
    entrypoint = rootfs / "usr" / "local" / "bin" / ENTRYPOINT
    entrypoint.parent.mkdir(parents=True, exist_ok=True)
    entrypoint.write_text(
        f"#!{PYTHON}\nimport sys\n\nfrom provisioner.__main__ import main\n\nsys.exit(main())\n",
        encoding="utf-8",
    )
    entrypoint.chmod(0o755)


def forget_install_source(site: Path) -> None:
    """pip records where each wheel came from (direct_url.json, for ours a scratch directory
    named at random) and lists that file in RECORD: drop both, or no two builds are alike."""
    for record in site.glob("*.dist-info/RECORD"):
        source = record.parent / "direct_url.json"
        if source.exists():
            source.unlink()
            entry = f"{record.parent.name}/direct_url.json,"
            lines = record.read_text(encoding="utf-8").splitlines(keepends=True)
            record.write_text(
                "".join(line for line in lines if not line.startswith(entry)), encoding="utf-8"
            )


def check_entry_point(rootfs: Path) -> None:
    """The image's entrypoint must call what pyproject.toml's console script names."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    target = pyproject["project"]["scripts"].get(ENTRYPOINT)
    if target != "provisioner.__main__:main":
        raise ImageBuildError(
            f"pyproject.toml's console script {ENTRYPOINT} is {target!r}, but the image's "
            f"entrypoint calls provisioner.__main__:main: update {Path(__file__).name}"
        )
    if not (rootfs / SITE_PACKAGES / "provisioner" / "__main__.py").is_file():
        raise ImageBuildError(f"the project's wheel did not install provisioner into {rootfs}")


def strip(rootfs: Path) -> None:
    """Remove every executable but the interpreter and the entrypoint, the package databases,
    documentation and the build-time directories: nothing at run time can install or shell."""
    for relative in REMOVED:
        path = rootfs / relative
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
    for directory in BIN_DIRECTORIES:
        base = rootfs / directory
        if base.is_symlink() or not base.is_dir():
            continue
        for entry in sorted(base.iterdir()):
            if str(entry.relative_to(rootfs)) not in KEPT_EXECUTABLES:
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
    for directory in BIN_DIRECTORIES:
        base = rootfs / directory
        if base.is_dir() and not base.is_symlink() and not any(base.iterdir()):
            base.rmdir()


def add_user_and_runtime_directories(rootfs: Path) -> None:
    """A passwd entry for the non-root user (Python's getpass and ~ want one), its home, /tmp."""
    etc = rootfs / "etc"
    etc.mkdir(exist_ok=True)
    (etc / "passwd").write_text(
        f"root:x:0:0:root:/root:/sbin/nologin\n"
        f"nonroot:x:{RUN_AS}:{RUN_AS}:nonroot:/home/nonroot:/sbin/nologin\n",
        encoding="utf-8",
    )
    (etc / "group").write_text(f"root:x:0:\nnonroot:x:{RUN_AS}:\n", encoding="utf-8")
    (rootfs / "home" / "nonroot").mkdir(parents=True, exist_ok=True)
    (rootfs / "root").mkdir(mode=0o700, exist_ok=True)
    tmp = rootfs / "tmp"
    tmp.mkdir(exist_ok=True)
    tmp.chmod(0o1777)


def compile_bytecode(rootfs: Path, logs: Path) -> None:
    """Bytecode for the standard library and the packages, compiled by the image's own
    interpreter (chroot): the user cannot write __pycache__ at run time, and without it every
    start recompiles the kubernetes client. Hash-based pycs carry no mtime: reproducible."""
    command = [
        shutil.which("chroot") or "/usr/sbin/chroot",
        str(rootfs),
        PYTHON,
        "-m",
        "compileall",
        "-q",
        "-j",
        "1",
        "--invalidation-mode",
        "unchecked-hash",
        "/usr/lib/python3.11",
        f"/{SITE_PACKAGES}",
    ]
    run("bytecode", command, logs, {"PATH": "/usr/bin", "PYTHONHASHSEED": "0", "LC_ALL": "C.UTF-8"})


def walk(rootfs: Path) -> list[Path]:
    """Every path under the root (symlinks not followed), parents before children, by bytes."""
    paths: list[Path] = []
    for directory, directories, files in os.walk(rootfs):
        paths.extend(Path(directory) / name for name in [*directories, *files])
    return sorted(paths, key=lambda path: str(path.relative_to(rootfs)).encode())


def write_layer(rootfs: Path, destination: Path) -> tuple[str, int]:
    """The root filesystem as one gzipped tar: sorted, owned by root (the user's home by the
    user), every mtime SOURCE_DATE_EPOCH. Returns (diff id, uncompressed bytes of files)."""
    uncompressed = hashlib.sha256()
    file_bytes = 0

    class Hashing:
        def __init__(self, out: gzip.GzipFile) -> None:
            self.out = out

        def write(self, data: bytes) -> int:
            uncompressed.update(data)
            return self.out.write(data)

    with (
        destination.open("wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=6, mtime=0) as zipped,
        tarfile.open(fileobj=Hashing(zipped), mode="w|", format=tarfile.PAX_FORMAT) as tar,  # type: ignore[call-overload]
    ):
        home = rootfs / "home" / "nonroot"
        for path in walk(rootfs):
            info = tar.gettarinfo(str(path), arcname=str(path.relative_to(rootfs)))
            owner = RUN_AS if path == home else 0
            info.uid = info.gid = owner
            info.uname = info.gname = ""
            info.mtime = SOURCE_DATE_EPOCH
            info.pax_headers = {}
            if info.isreg():
                file_bytes += info.size
                with path.open("rb") as content:
                    tar.addfile(info, content)
            else:
                tar.addfile(info)
    return f"sha256:{uncompressed.hexdigest()}", file_bytes


def blob(layout: Path, data: bytes) -> dict[str, Any]:
    digest = hashlib.sha256(data).hexdigest()
    (layout / "blobs" / "sha256" / digest).write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def canonical(document: dict[str, Any]) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def write_layout(rootfs: Path, layout: Path, tag: str) -> tuple[str, int, int]:
    """The OCI image layout: the layer, the config, the manifest, the index naming the tag.
    Returns (manifest digest, compressed bytes, rootfs bytes)."""
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    staged = layout / "layer.tar.gz"
    diff_id, rootfs_bytes = write_layer(rootfs, staged)
    layer = {"mediaType": LAYER_TYPE, **blob(layout, staged.read_bytes())}
    staged.unlink()
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(SOURCE_DATE_EPOCH))
    config = {
        "architecture": ARCHITECTURE,
        "os": "linux",
        "created": created,
        "config": {
            "User": f"{RUN_AS}:{RUN_AS}",
            "Entrypoint": [ENTRYPOINT],
            "Env": [
                "PATH=/usr/local/bin:/usr/bin",
                "HOME=/home/nonroot",
                "PYTHONUNBUFFERED=1",
                "PYTHONDONTWRITEBYTECODE=1",
                "LANG=C.UTF-8",
            ],
            "WorkingDir": "/",
            "Labels": {
                "org.opencontainers.image.title": REPOSITORY,
                "org.opencontainers.image.version": tag,
            },
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": created, "created_by": "scripts/build_image.py"}],
    }
    config_descriptor = {"mediaType": CONFIG_TYPE, **blob(layout, canonical(config))}
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": config_descriptor,
        "layers": [layer],
    }
    manifest_descriptor = {"mediaType": MANIFEST_TYPE, **blob(layout, canonical(manifest))}
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {**manifest_descriptor, "annotations": {"org.opencontainers.image.ref.name": tag}}
        ],
    }
    (layout / "index.json").write_bytes(canonical(index))
    (layout / "oci-layout").write_bytes(canonical({"imageLayoutVersion": "1.0.0"}))
    compressed = int(config_descriptor["size"]) + int(layer["size"])
    return str(manifest_descriptor["digest"]), compressed, rootfs_bytes


def write_archive(layout: Path, archive: Path) -> None:
    """The layout as one tar (skopeo's `oci-archive:`), sorted, fixed owners and mtimes."""
    with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(layout.rglob("*"), key=lambda path: str(path).encode()):
            info = tar.gettarinfo(str(path), arcname=str(path.relative_to(layout)))
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = SOURCE_DATE_EPOCH
            if info.isreg():
                with path.open("rb") as content:
                    tar.addfile(info, content)
            else:
                tar.addfile(info)


def extracted_debian_packages(rootfs: Path) -> list[sbom.DebianPackage]:
    try:
        return sbom.debian_packages(rootfs / APT_ARCHIVES)
    except sbom.SbomError as error:
        raise ImageBuildError(f"the SBOM: {error}") from error


def write_sbom(image: BuiltImage, rootfs: Path, debian: list[sbom.DebianPackage]) -> None:
    """The image's SBOM beside its archive: the Debian packages extracted into it that left a
    file in the finished root, and the wheels in its site-packages."""
    bill = sbom.document(
        repository=REPOSITORY,
        tag=image.tag,
        digest=image.digest,
        architecture=ARCHITECTURE,
        distro=DEBIAN_DISTRO,
        debian=sbom.kept_in(rootfs, debian),
        wheels=sbom.installed_wheels(rootfs / SITE_PACKAGES),
        tool_version=image.tag,
    )
    sbom.write(image.sbom, bill)


def build(directory: Path) -> BuiltImage:
    """Build the image into `directory` (which must not exist); atomic: a failed build
    leaves nothing there."""
    check_lock_matches_pyproject()
    tag = project_version()
    logs = cache_dir() / "logs"
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="image-", dir=directory.parent))
    try:
        rootfs = work / "rootfs"
        progress(f"root filesystem from Debian {DEBIAN_SUITE}: {', '.join(DEBIAN_PACKAGES)}")
        build_root_filesystem(rootfs, logs)
        debian = extracted_debian_packages(rootfs)
        progress("installing the locked wheels and the project's wheel")
        install_python_packages(rootfs, work, logs)
        check_entry_point(rootfs)
        strip(rootfs)
        add_user_and_runtime_directories(rootfs)
        progress("compiling bytecode with the image's interpreter")
        compile_bytecode(rootfs, logs)
        progress("writing the OCI layout and archive")
        result = work / "result"
        result.mkdir()
        digest, compressed, rootfs_bytes = write_layout(rootfs, result / "oci", tag)
        write_archive(result / "oci", result / "provisioner.oci.tar")
        image = BuiltImage(result, digest, tag, compressed, rootfs_bytes)
        write_sbom(image, rootfs, debian)
        (result / "image.json").write_text(json.dumps(image.summary(), indent=2) + "\n")
        result.rename(directory)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    progress(f"built in {time.monotonic() - started:.0f}s")
    return BuiltImage.load(directory)


KEPT_IMAGES = 6
"""Cached images kept, the most recently used first: every change to the project's files is a
new image (about 200 MiB unpacked with its archive), so without a bound a checkout that is
tested after each change fills the disk; six cover switching between a few branches and test
runs of several checkouts at once, each of which needs its image until it ends. (The upgrade
test's earlier version is built into a cache of its own: tests/engine/previous_version.py.)"""


def image(rebuild: bool = False) -> BuiltImage:
    """The cached image of the current inputs, built if it is not there yet."""
    ensure_tools()  # also when cached: the tests unpack with umoci, users push with skopeo
    directory = cache_dir() / f"image-{input_key()}"
    directory.parent.mkdir(parents=True, exist_ok=True)
    # Sessions started together (two test runs, a test run and the demo) build it once: the
    # others wait here, then find it built.
    with directory.with_name(f"{directory.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if rebuild:
            shutil.rmtree(directory, ignore_errors=True)
        if (directory / "image.json").is_file():
            built = BuiltImage.load(directory)
        else:
            progress(f"building {REPOSITORY}:{project_version()} into {directory}")
            built = build(directory)
        os.utime(directory)  # its use, which the pruning goes by
    prune_images(directory.parent)
    return built


def prune_images(cache: Path, kept: int = KEPT_IMAGES) -> None:
    """Remove all but the `kept` most recently used images; one whose lock another session
    holds (it is being built) is left alone. The empty lock files stay: removing one could let
    two sessions lock different files of the same name."""
    images = sorted(
        (
            path
            for path in cache.glob("image-*")
            if path.is_dir() and not path.name.startswith("image-verify-")
        ),
        key=lambda path: path.stat().st_mtime,
        reverse=True,
    )
    for old in images[kept:]:
        with old.with_name(f"{old.name}.lock").open("w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            shutil.rmtree(old, ignore_errors=True)
            progress(f"removed the older cached image {old.name}")


def file_digest(path: Path) -> str:
    with path.open("rb") as content:
        return hashlib.file_digest(content, "sha256").hexdigest()


def describe(built: BuiltImage) -> None:
    megabytes = 1024 * 1024
    print(f"image: {built.reference} {built.digest}", file=sys.stderr)
    print(
        f"image: {built.compressed_bytes / megabytes:.1f} MiB compressed, "
        f"{built.rootfs_bytes / megabytes:.1f} MiB unpacked",
        file=sys.stderr,
    )
    print(f"image: archive {built.archive}", file=sys.stderr)
    print(f"image: SBOM (CycloneDX {sbom.SPEC_VERSION}) {built.sbom}", file=sys.stderr)


def reproducible(built: BuiltImage) -> bool:
    """Build the same inputs again in a scratch directory: same digest, same archive bytes?"""
    scratch = Path(tempfile.mkdtemp(prefix="image-verify-", dir=cache_dir()))
    try:
        again = build(scratch / "image")
        same_archive = file_digest(again.archive) == file_digest(built.archive)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if again.digest != built.digest or not same_archive:
        progress(f"NOT reproducible: {built.digest} then {again.digest}")
        return False
    progress(f"reproducible: a second build gave the same digest and archive {again.digest}")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.build_image", description=__doc__)
    parser.add_argument("--path", action="store_true", help="print the cached directory only")
    parser.add_argument("--rebuild", action="store_true", help="ignore the cached image")
    parser.add_argument(
        "--verify", action="store_true", help="build again from scratch and compare the digests"
    )
    options = parser.parse_args(argv)
    try:
        built = image(rebuild=options.rebuild)
        describe(built)
        if options.verify and not reproducible(built):
            return 1
    except ImageBuildError as error:
        print(f"image: {error}", file=sys.stderr)
        return 1
    if options.path:
        print(built.directory)
    return 0


if __name__ == "__main__":
    sys.exit(main())
