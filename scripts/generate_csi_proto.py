"""Generates provisioner/csi/generated/ (the CSI messages) from the spec's csi.proto.

Why: the node plugin speaks CSI over gRPC; its messages are the spec's protobuf, generated with
the pinned grpcio-tools (pyproject.toml) from the spec version pinned in versions.env
(CSI_SPEC_VERSION), which `go mod download` fetches from the Go module proxy: the spec is a Go
module. Only messages and their type stubs are generated; provisioner/csi/services.py binds the
RPCs to them with typed handlers, so no untyped servicer base class is needed.

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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "provisioner" / "csi" / "generated"
MODULE = "github.com/container-storage-interface/spec"
GENERATED_FILES = ("csi_pb2.py", "csi_pb2.pyi")


class GenerationError(Exception):
    """The proto could not be fetched or compiled: the message says which step and why."""


def spec_version() -> str:
    for line in (ROOT / "versions.env").read_text(encoding="utf-8").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "CSI_SPEC_VERSION":
            return value.strip()
    raise GenerationError("versions.env pins no CSI_SPEC_VERSION")


def header(version: str) -> str:
    return (
        f"# Generated from csi.proto of {MODULE} {version} by grpcio-tools; do not edit.\n"
        "# Regenerate: python -m scripts.generate_csi_proto (the versions: versions.env\n"
        "# CSI_SPEC_VERSION, pyproject.toml grpcio-tools).\n"
    )


def download_proto(version: str) -> Path:
    """csi.proto of the pinned spec, from the Go module cache (downloaded there if missing)."""
    # The module's go.sum is not consulted for a bare download; the proxy's checksum database
    # answers 404 in some workplaces, so the module is trusted by the pinned version alone.
    environment = {**os.environ, "GONOSUMDB": MODULE, "GOFLAGS": "-mod=mod"}
    try:
        done = subprocess.run(
            ["go", "mod", "download", "-json", f"{MODULE}@{version}"],
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
            f"go mod download {MODULE}@{version} failed: {error.stdout}{error.stderr}"
        ) from error
    proto = Path(json.loads(done.stdout)["Dir"]) / "csi.proto"
    if not proto.is_file():
        raise GenerationError(f"{MODULE}@{version} has no csi.proto at {proto}")
    return proto


def generate(into: Path) -> None:
    """Writes the generated files, each with the header, into the directory `into`."""
    from grpc_tools import protoc  # noqa: PLC0415 (a dev tool: only this script needs it)

    version = spec_version()
    proto = download_proto(version)
    includes = Path(protoc.__file__).parent / "_proto"
    with tempfile.TemporaryDirectory() as scratch:
        status = protoc.main(
            [
                "protoc",
                f"-I{proto.parent}",
                f"-I{includes}",
                f"--python_out={scratch}",
                f"--pyi_out={scratch}",
                str(proto),
            ]
        )
        if status != 0:
            raise GenerationError(f"protoc failed on {proto} (status {status})")
        for name in GENERATED_FILES:
            text = (Path(scratch) / name).read_text(encoding="utf-8")
            (into / name).write_text(header(version) + text, encoding="utf-8")


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
