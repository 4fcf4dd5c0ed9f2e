"""The SBOM writer (scripts/sbom.py): what it reads from .deb files and .dist-info folders, and
the package URLs and CycloneDX fields scanners match on. The built image's own SBOM is checked
against the image in tests/image/test_image.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from scripts import build_image, sbom

DIGEST = "sha256:" + "ab" * 32


def _deb(directory: Path, control: str, files: tuple[str, ...] = ()) -> None:
    """A real .deb (dpkg-deb --build) with this control file and these (empty) files."""
    package = directory / "package"
    (package / "DEBIAN").mkdir(parents=True)
    (package / "DEBIAN" / "control").write_text(control, encoding="utf-8")
    for name in files:
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).touch()
    name = control.split("\n", 1)[0].removeprefix("Package: ")
    subprocess.run(
        ["dpkg-deb", "--root-owner-group", "--build", str(package), str(directory / f"{name}.deb")],
        check=True,
        capture_output=True,
    )
    shutil.rmtree(package)


CONTROL = "Maintainer: m <m@example.org>\nDescription: d\n"
ZLIB = f"Package: zlib1g\nVersion: 1:1.2.13.dfsg-1\nArchitecture: amd64\nSource: zlib\n{CONTROL}"
TZDATA = f"Package: tzdata\nVersion: 2025b-0+deb12u2\nArchitecture: all\n{CONTROL}"


def test_debian_packages_are_read_from_the_debs_control_files(tmp_path: Path) -> None:
    """Each .deb of the folder (dpkg-deb --show alone would read only the first)."""
    _deb(tmp_path, ZLIB, ("usr/lib/libz.so.1", "usr/share/doc/zlib1g/copyright"))
    _deb(tmp_path, TZDATA)
    packages = sbom.debian_packages(tmp_path)
    assert packages == [
        sbom.DebianPackage("tzdata", "2025b-0+deb12u2", "all", "tzdata", "2025b-0+deb12u2"),
        sbom.DebianPackage("zlib1g", "1:1.2.13.dfsg-1", "amd64", "zlib", "1:1.2.13.dfsg-1"),
    ]
    assert sorted(packages[1].files) == ["usr/lib/libz.so.1", "usr/share/doc/zlib1g/copyright"]


def test_only_packages_with_a_file_left_in_the_root_are_kept(tmp_path: Path) -> None:
    _deb(tmp_path, ZLIB, ("usr/lib/libz.so.1", "usr/share/doc/zlib1g/copyright"))
    _deb(tmp_path, TZDATA, ("usr/share/doc/tzdata/copyright",))
    packages = sbom.debian_packages(tmp_path)
    root = tmp_path / "root"
    (root / "usr" / "lib").mkdir(parents=True)
    assert sbom.kept_in(root, packages) == []
    (root / "usr" / "lib" / "libz.so.1").symlink_to("gone")  # a link counts, even dangling
    assert [package.name for package in sbom.kept_in(root, packages)] == ["zlib1g"]


def test_no_debs_is_an_error_not_an_empty_list(tmp_path: Path) -> None:
    with pytest.raises(sbom.SbomError, match=r"no \.deb files"):
        sbom.debian_packages(tmp_path)


def test_wheels_are_read_from_their_dist_info(tmp_path: Path) -> None:
    for folder, name, version in [
        ("PyYAML-6.0.3.dist-info", "PyYAML", "6.0.3"),
        ("local_path_storage-0.1.0.dist-info", "local-path-storage", "0.1.0"),
    ]:
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "METADATA").write_text(
            f"Metadata-Version: 2.4\nName: {name}\nVersion: {version}\n", encoding="utf-8"
        )
    (tmp_path / "yaml").mkdir()  # a package's own folder is not a distribution
    assert sbom.installed_wheels(tmp_path) == [
        sbom.Wheel("PyYAML", "6.0.3"),
        sbom.Wheel("local-path-storage", "0.1.0"),
    ]


@pytest.mark.parametrize(
    ("package", "purl"),
    [
        (
            sbom.DebianPackage("libc6", "2.36-9+deb12u10", "amd64", "glibc", "2.36-9+deb12u10"),
            "pkg:deb/debian/libc6@2.36-9%2Bdeb12u10?arch=amd64&distro=debian-12&upstream=glibc",
        ),
        (
            sbom.DebianPackage("zlib1g", "1:1.2.13.dfsg-1", "amd64", "zlib1g", "1:1.2.13.dfsg-1"),
            "pkg:deb/debian/zlib1g@1:1.2.13.dfsg-1?arch=amd64&distro=debian-12",
        ),
        (
            sbom.DebianPackage("libgcc-s1", "12.2.0-14", "amd64", "gcc-12", "12.2.0-14+deb12u1"),
            "pkg:deb/debian/libgcc-s1@12.2.0-14?arch=amd64&distro=debian-12"
            "&upstream=gcc-12%4012.2.0-14%2Bdeb12u1",
        ),
        (
            sbom.DebianPackage("libstdc++6", "12.2.0-14~x", "amd64", "libstdc++6", "12.2.0-14~x"),
            "pkg:deb/debian/libstdc%2B%2B6@12.2.0-14~x?arch=amd64&distro=debian-12",
        ),
    ],
    ids=["source-differs", "epoch", "source-version-differs", "plus-and-tilde"],
)
def test_debian_purls(package: sbom.DebianPackage, purl: str) -> None:
    assert sbom.debian_purl(package, "debian-12") == purl


def test_pypi_purls_use_the_normalised_name() -> None:
    assert sbom.pypi_purl(sbom.Wheel("PyYAML", "6.0.3")) == "pkg:pypi/pyyaml@6.0.3"
    assert sbom.pypi_purl(sbom.Wheel("typing_extensions", "4.15.0")) == (
        "pkg:pypi/typing-extensions@4.15.0"
    )


def _document(digest: str = DIGEST) -> dict[str, object]:
    return sbom.document(
        repository="local-path-storage/provisioner",
        tag="1.2.3",
        digest=digest,
        architecture="amd64",
        distro="debian-12",
        debian=[sbom.DebianPackage("libc6", "2.36-9", "amd64", "glibc", "2.36-9")],
        wheels=[sbom.Wheel("PyYAML", "6.0.3")],
        tool_version="1.2.3",
    )


def test_the_document_describes_the_image_by_digest() -> None:
    document = _document()
    assert (document["bomFormat"], document["specVersion"], document["version"]) == (
        "CycloneDX",
        "1.5",
        1,
    )
    image_purl = f"pkg:oci/provisioner@sha256:{'ab' * 32}?arch=amd64&tag=1.2.3"
    assert document["metadata"]["component"] == {  # type: ignore[index]
        "type": "container",
        "bom-ref": image_purl,
        "name": "local-path-storage/provisioner",
        "version": "1.2.3",
        "purl": image_purl,
        "hashes": [{"alg": "SHA-256", "content": "ab" * 32}],
    }
    assert document["components"] == [
        {
            "type": "library",
            "bom-ref": "pkg:deb/debian/libc6@2.36-9?arch=amd64&distro=debian-12&upstream=glibc",
            "name": "libc6",
            "version": "2.36-9",
            "purl": "pkg:deb/debian/libc6@2.36-9?arch=amd64&distro=debian-12&upstream=glibc",
        },
        {
            "type": "library",
            "bom-ref": "pkg:pypi/pyyaml@6.0.3",
            "name": "PyYAML",
            "version": "6.0.3",
            "purl": "pkg:pypi/pyyaml@6.0.3",
        },
    ]


def test_the_same_image_gets_the_same_serial_number_and_another_a_new_one() -> None:
    """Reproducible (no clock, no random), yet unique per image, as CycloneDX asks."""
    assert _document()["serialNumber"] == _document()["serialNumber"]
    other = _document("sha256:" + "cd" * 32)
    assert other["serialNumber"] != _document()["serialNumber"]
    assert str(other["serialNumber"]).startswith("urn:uuid:")


def test_a_digest_that_is_not_sha256_is_refused() -> None:
    with pytest.raises(sbom.SbomError, match="not a sha256 manifest digest"):
        _document("sha256:0")


def test_make_image_prints_where_the_sbom_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    built = build_image.BuiltImage(tmp_path, DIGEST, "1.2.3", 1, 2)
    build_image.describe(built)
    assert f"image: SBOM (CycloneDX 1.5) {tmp_path / 'provisioner.cdx.json'}\n" in (
        capsys.readouterr().err
    )
