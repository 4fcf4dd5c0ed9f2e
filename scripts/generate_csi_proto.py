"""Generates provisioner/csi/generated/: the CSI messages from the spec's csi.proto, and the
kubelet's plugin registration messages from k8s.io/kubelet's pluginregistration/v1/api.proto.

Why: the node plugin speaks CSI over gRPC, and registers itself with the kubelet over the
kubelet's own gRPC registration API; both are protobuf in Go modules, which `go mod download`
fetches from the Go module proxy. The messages are generated with the pinned grpcio-tools
(pyproject.toml) from the versions pinned in versions.env: CSI_SPEC_VERSION for the spec, and
KUBERNETES_VERSION for k8s.io/kubelet (its staging module is tagged v0.<minor>.<patch> with
every Kubernetes release, so the registration API is exactly the one our kubelet serves). Only
messages and their type stubs are generated; provisioner/csi/services.py binds the RPCs to them
with typed handlers, so no untyped servicer base class is needed.

    python -m scripts.generate_csi_proto           # rewrite the generated files
    python -m scripts.generate_csi_proto --check   # exit 1 when they differ from a fresh run

tests/provisioner/csi/test_generated_messages.py runs the check.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "provisioner" / "csi" / "generated"


class GenerationError(Exception):
    """The proto could not be fetched or compiled: the message says which step and why."""


@dataclass(frozen=True)
class ProtoSource:
    """One proto file of a Go module, and the module name its messages are written to."""

    module: str
    proto: str
    """The proto's path inside the module, also the name protoc gives its descriptor."""
    output: str
    """The generated module's name in OUTPUT (`<output>_pb2.py` and `.pyi`)."""
    version_key: str
    """The versions.env key whose value pins the module's version."""

    @property
    def files(self) -> tuple[str, str]:
        return (f"{self.output}_pb2.py", f"{self.output}_pb2.pyi")


CSI_SPEC = ProtoSource(
    "github.com/container-storage-interface/spec", "csi.proto", "csi", "CSI_SPEC_VERSION"
)
PLUGIN_REGISTRATION = ProtoSource(
    "k8s.io/kubelet",
    "pkg/apis/pluginregistration/v1/api.proto",
    "pluginregistration",
    "KUBERNETES_VERSION",
)
SOURCES = (CSI_SPEC, PLUGIN_REGISTRATION)
GENERATED_FILES = tuple(name for source in SOURCES for name in source.files)


def pinned_version(key: str) -> str:
    for line in (ROOT / "versions.env").read_text(encoding="utf-8").splitlines():
        name, _, value = line.partition("=")
        if name.strip() == key:
            return value.strip()
    raise GenerationError(f"versions.env pins no {key}")


def spec_version() -> str:
    return pinned_version(CSI_SPEC.version_key)


def module_version(source: ProtoSource) -> str:
    """The module's version: the pin itself, or for a Kubernetes staging module (k8s.io/kubelet)
    the v0 tag released with KUBERNETES_VERSION (v1.36.3 -> v0.36.3)."""
    version = pinned_version(source.version_key)
    if source.version_key == "KUBERNETES_VERSION":
        major, _, rest = version.partition(".")
        if major != "v1" or not rest:
            raise GenerationError(f"versions.env KUBERNETES_VERSION {version!r} is not v1.x.y")
        return f"v0.{rest}"
    return version


def header(source: ProtoSource, version: str) -> str:
    return (
        f"# Generated from {source.proto} of {source.module} {version} by grpcio-tools;"
        " do not edit.\n"
        "# Regenerate: python -m scripts.generate_csi_proto (the versions: versions.env\n"
        f"# {source.version_key}, pyproject.toml grpcio-tools).\n"
    )


def download_module(source: ProtoSource, version: str) -> Path:
    """The module's directory in the Go module cache (downloaded there if missing)."""
    # The module's go.sum is not consulted for a bare download; the proxy's checksum database
    # answers 404 in some workplaces, so the module is trusted by the pinned version alone.
    environment = {**os.environ, "GONOSUMDB": source.module, "GOFLAGS": "-mod=mod"}
    try:
        done = subprocess.run(
            ["go", "mod", "download", "-json", f"{source.module}@{version}"],
            capture_output=True,
            text=True,
            check=True,
            env=environment,
            cwd=tempfile.gettempdir(),
        )
    except FileNotFoundError as error:
        raise GenerationError(
            "the Go toolchain is missing: install Go and put 'go' on PATH"
        ) from error
    except subprocess.CalledProcessError as error:
        raise GenerationError(
            f"go mod download {source.module}@{version} failed: {error.stdout}{error.stderr}"
        ) from error
    directory = Path(json.loads(done.stdout)["Dir"])
    if not (directory / source.proto).is_file():
        raise GenerationError(f"{source.module}@{version} has no {source.proto}")
    return directory


def generate_source(source: ProtoSource, into: Path) -> None:
    from grpc_tools import protoc  # noqa: PLC0415 (a dev tool: only this script needs it)

    version = module_version(source)
    module = download_module(source, version)
    includes = Path(protoc.__file__).parent / "_proto"
    with tempfile.TemporaryDirectory() as scratch:
        status = protoc.main(
            [
                "protoc",
                f"-I{module}",
                f"-I{includes}",
                f"--python_out={scratch}",
                f"--pyi_out={scratch}",
                str(module / source.proto),
            ]
        )
        if status != 0:
            raise GenerationError(f"protoc failed on {module / source.proto} (status {status})")
        made = Path(scratch) / source.proto
        for name, suffix in zip(source.files, (".py", ".pyi"), strict=True):
            text = made.with_name(f"{made.stem}_pb2{suffix}").read_text(encoding="utf-8")
            (into / name).write_text(header(source, version) + text, encoding="utf-8")


def generate(into: Path) -> None:
    """Writes the generated files, each with the header, into the directory `into`."""
    for source in SOURCES:
        generate_source(source, into)


def stale_files() -> list[str]:
    """The generated files that differ from a fresh generation (empty: up to date)."""
    with tempfile.TemporaryDirectory() as fresh:
        generate(Path(fresh))
        return [
            name
            for name in GENERATED_FILES
            if not (OUTPUT / name).is_file()
            or (OUTPUT / name).read_bytes() != (Path(fresh) / name).read_bytes()
        ]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare only; exit 1 when stale")
    arguments = parser.parse_args(argv)
    try:
        if arguments.check:
            stale = stale_files()
            for name in stale:
                print(
                    f"generate_csi_proto: {OUTPUT / name} is stale:"
                    " run python -m scripts.generate_csi_proto"
                )
            return 1 if stale else 0
        generate(OUTPUT)
    except GenerationError as error:
        print(f"generate_csi_proto: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
