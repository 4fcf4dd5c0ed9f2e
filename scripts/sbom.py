"""The image's software bill of materials: a CycloneDX 1.5 JSON document listing every Debian
package extracted into the image's root filesystem and every wheel installed in it, each with
its name, version and package URL, under the image itself (its manifest digest and tag).

Why a writer of our own: the document is a few fixed fields per package; the CycloneDX library
on PyPI would bring four more packages into every build for that. Vulnerability scanners (Grype,
Trivy, Dependency-Track) read it: the Debian purls carry the architecture, the release
(`distro=debian-12`) and, where it differs from the binary package, the source package
(`upstream=`), which is what Debian's security tracker names. The document is reproducible:
same image, same bytes (no timestamp; the serial number derives from the digest).
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import tarfile
import uuid
from dataclasses import dataclass, field
from importlib.metadata import PathDistribution
from pathlib import Path
from typing import Any
from urllib.parse import quote

SPEC_VERSION = "1.5"
MEDIA_TYPE = "application/vnd.cyclonedx+json"
_FIELDS = ("Package", "Version", "Architecture", "source:Package", "source:Version")


class SbomError(Exception):
    """The image's packages could not be read; the message says which and why."""


@dataclass(frozen=True, order=True)
class DebianPackage:
    name: str
    version: str
    architecture: str
    source: str
    source_version: str
    files: tuple[str, ...] = field(default=(), compare=False, repr=False)
    """What it unpacks other than directories, relative to the root."""


@dataclass(frozen=True, order=True)
class Wheel:
    name: str
    version: str


def debian_packages(archives: Path) -> list[DebianPackage]:
    """The .deb files apt downloaded for the root filesystem, as their control files say
    (dpkg-deb, which every Debian or Ubuntu build machine has)."""
    debs = sorted(archives.glob("*.deb"))
    if not debs:
        raise SbomError(f"no .deb files in {archives}: the Debian packages cannot be listed")
    return sorted(_read(deb) for deb in debs)


def _read(deb: Path) -> DebianPackage:
    # One file per call: given several, dpkg-deb --show reads only the first.
    show_format = "\t".join(f"${{{name}}}" for name in _FIELDS)
    control = _dpkg_deb(["--show", f"--showformat={show_format}", str(deb)])
    with tarfile.open(
        fileobj=io.BytesIO(_dpkg_deb(["--fsys-tarfile", str(deb)])), mode="r:"
    ) as tar:
        files = tuple(member.name.removeprefix("./") for member in tar if not member.isdir())
    name, version, architecture, source, source_version = control.decode().split("\t")
    return DebianPackage(name, version, architecture, source, source_version, files)


def _dpkg_deb(arguments: list[str]) -> bytes:
    try:
        return subprocess.run(["dpkg-deb", *arguments], check=True, capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError) as error:
        raise SbomError(f"dpkg-deb {' '.join(arguments)} failed: {error}") from error


def kept_in(root: Path, packages: list[DebianPackage]) -> list[DebianPackage]:
    """The packages of which at least one file is left in `root`: the image drops executables,
    documentation and the package databases, and with them every file of some packages
    (gcc-12-base ships only documentation), which the image then does not contain."""
    return [
        package
        for package in packages
        if any((root / name).is_symlink() or (root / name).exists() for name in package.files)
    ]


def installed_wheels(site_packages: Path) -> list[Wheel]:
    """Every distribution installed in `site_packages`, from its .dist-info metadata."""
    found = []
    for info in sorted(site_packages.glob("*.dist-info")):
        metadata = PathDistribution(info).metadata
        found.append(Wheel(metadata["Name"], metadata["Version"]))
    return sorted(found)


def _encode(text: str) -> str:
    """purl's percent-encoding: everything but unreserved characters, and ':' left as is."""
    return quote(text, safe="").replace("%3A", ":")


def debian_purl(package: DebianPackage, distro: str) -> str:
    qualifiers = {"arch": package.architecture, "distro": distro}
    if (package.source, package.source_version) != (package.name, package.version):
        upstream = package.source
        if package.source_version != package.version:
            upstream = f"{upstream}@{package.source_version}"
        qualifiers["upstream"] = upstream
    query = "&".join(f"{key}={_encode(value)}" for key, value in sorted(qualifiers.items()))
    return f"pkg:deb/debian/{_encode(package.name)}@{_encode(package.version)}?{query}"


def pypi_purl(wheel: Wheel) -> str:
    """The purl pypi type's name is the PEP 503 normalised one."""
    name = re.sub(r"[-_.]+", "-", wheel.name).lower()
    return f"pkg:pypi/{_encode(name)}@{_encode(wheel.version)}"


def document(
    *,
    repository: str,
    tag: str,
    digest: str,
    architecture: str,
    distro: str,
    debian: list[DebianPackage],
    wheels: list[Wheel],
    tool_version: str,
) -> dict[str, Any]:
    """The CycloneDX document of the image `repository:tag` with manifest `digest`."""
    algorithm, _, hex_digest = digest.partition(":")
    if algorithm != "sha256" or not re.fullmatch(r"[0-9a-f]{64}", hex_digest):
        raise SbomError(f"not a sha256 manifest digest: {digest!r}")
    name = _encode(repository.rpartition("/")[2])
    image_purl = f"pkg:oci/{name}@{_encode(digest)}?arch={architecture}&tag={_encode(tag)}"
    components = [
        *(
            _component(package.name, package.version, debian_purl(package, distro))
            for package in debian
        ),
        *(_component(wheel.name, wheel.version, pypi_purl(wheel)) for wheel in wheels),
    ]
    return {
        "bomFormat": "CycloneDX",
        "specVersion": SPEC_VERSION,
        "serialNumber": uuid.uuid5(uuid.NAMESPACE_URL, image_purl).urn,
        "version": 1,
        "metadata": {
            "tools": {
                "components": [
                    {
                        "type": "application",
                        "name": "local-path-storage scripts/build_image.py",
                        "version": tool_version,
                    }
                ]
            },
            "component": {
                "type": "container",
                "bom-ref": image_purl,
                "name": repository,
                "version": tag,
                "purl": image_purl,
                "hashes": [{"alg": "SHA-256", "content": hex_digest}],
            },
        },
        "components": sorted(components, key=lambda component: component["bom-ref"]),
    }


def _component(name: str, version: str, purl: str) -> dict[str, Any]:
    return {"type": "library", "bom-ref": purl, "name": name, "version": version, "purl": purl}


def write(path: Path, sbom: dict[str, Any]) -> None:
    path.write_text(json.dumps(sbom, indent=2, sort_keys=True) + "\n", encoding="utf-8")
