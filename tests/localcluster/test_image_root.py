"""The provisioner's built image as an image-table entry: the layout read, the layer unpacked
once with its owners and modes, and mount targets resolved inside the image's root."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from localcluster.errors import ClusterError
from localcluster.image_root import ROOTFS, image_runtime, unpack
from localcluster.pod_sandbox import SandboxError, _inside


def _blob(layout: Path, data: bytes) -> dict[str, object]:
    digest = hashlib.sha256(data).hexdigest()
    (layout / "blobs" / "sha256" / digest).write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def _layer() -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, mode, uid in (("tmp", 0o1777, 0), ("home/nonroot", 0o755, 65532)):
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.uid, info.gid = tarfile.DIRTYPE, mode, uid, uid
            tar.addfile(info)
        program = b"#!/usr/bin/python3.11\n"
        info = tarfile.TarInfo("usr/local/bin/provisioner")
        info.size, info.mode = len(program), 0o755
        tar.addfile(info, io.BytesIO(program))
        link = tarfile.TarInfo("var/run")
        link.type, link.linkname = tarfile.SYMTYPE, "/run"
        tar.addfile(link)
    return gzip.compress(raw.getvalue())


def _image(directory: Path) -> Path:
    layout = directory / "oci"
    (layout / "blobs" / "sha256").mkdir(parents=True)
    config = {
        "config": {
            "User": "65532:65532",
            "Entrypoint": ["provisioner"],
            "Env": ["PATH=/usr/local/bin:/usr/bin", "HOME=/home/nonroot"],
            "WorkingDir": "/",
        }
    }
    layer = {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", **_blob(layout, _layer())}
    manifest = {"config": _blob(layout, json.dumps(config).encode()), "layers": [layer]}
    index = {"manifests": [_blob(layout, json.dumps(manifest).encode())]}
    (layout / "index.json").write_text(json.dumps(index))
    return directory


def test_the_image_is_its_unpacked_layer_and_its_config(tmp_path: Path) -> None:
    runtime = image_runtime(_image(tmp_path / "image-1"))
    root = tmp_path / "image-1" / ROOTFS
    assert runtime.root == root
    assert (runtime.user, runtime.group) == (65532, 65532)
    assert runtime.entrypoint == ("provisioner",)
    assert runtime.env == {"PATH": "/usr/local/bin:/usr/bin", "HOME": "/home/nonroot"}
    assert (root / "tmp").stat().st_mode & 0o7777 == 0o1777, "modes as the image has them"
    assert (root / "home" / "nonroot").stat().st_uid == 65532, "owners by number"
    assert (root / "usr/local/bin/provisioner").stat().st_mode & 0o777 == 0o755
    assert root.stat().st_mode & 0o777 == 0o755
    assert (root / "var" / "run").readlink() == Path("/run")
    left = sorted(path.name for path in (tmp_path / "image-1").iterdir())
    assert left == ["oci", ROOTFS], "no scratch directory left"


def test_an_unpacked_root_is_reused_and_a_concurrent_one_is_discarded(tmp_path: Path) -> None:
    directory = _image(tmp_path / "image-1")
    first = image_runtime(directory)
    assert first.root is not None
    (first.root / "marker").touch()
    assert image_runtime(directory).root == first.root
    assert (first.root / "marker").exists(), "not unpacked again"
    # Another session unpacked while this one did: its rename found the directory there.
    layer = next(p for p in (directory / "oci/blobs/sha256").iterdir() if p.stat().st_size > 100)
    late = tmp_path / "late"
    late.mkdir()
    (late / "theirs").touch()
    assert unpack(layer, late) == late
    assert sorted(path.name for path in late.iterdir()) == ["theirs"]
    assert [path.name for path in tmp_path.iterdir() if path.name.startswith(".")] == []


def test_a_layout_that_is_not_one_gzip_layer_says_how_to_build_it(tmp_path: Path) -> None:
    (tmp_path / "oci").mkdir()
    with pytest.raises(ClusterError, match=r"scripts\.build_image"):
        image_runtime(tmp_path)


def test_mount_targets_follow_the_images_symlinks_inside_its_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "usr" / "lib").mkdir(parents=True)
    (root / "var").mkdir()
    (root / "var" / "run").symlink_to("/run")
    (root / "lib").symlink_to("usr/lib")
    (root / "escape").symlink_to("../../..")
    secrets = "/var/run/secrets/kubernetes.io/serviceaccount"
    inside = str(root)
    assert _inside(inside, secrets) == str(root / "run/secrets/kubernetes.io/serviceaccount")
    assert _inside(inside, "/lib/x") == str(root / "usr/lib/x")
    assert _inside(inside, "/escape/etc/passwd") == str(root / "etc/passwd")
    assert _inside(inside, "/../../etc") == str(root / "etc")
    (root / "loop").symlink_to("loop")
    with pytest.raises(SandboxError, match="symbolic links"):
        _inside(inside, "/loop/x")
