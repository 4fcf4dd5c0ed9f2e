"""The provisioner's built OCI image as an image-table entry: its layer unpacked once, its config.

Why: the harness must run the Deployment's pod from the very artifact a user pushes (what
`python -m scripts.build_image` leaves in its cache directory), so a file missing from the image
fails the tests. The single gzip layer is unpacked next to the layout, once per image (the
directory is keyed by the image's inputs); concurrent sessions each unpack into a scratch
directory and the first rename wins. The config gives the process's environment, user,
entrypoint and working directory, as a container runtime reads them.
"""

from __future__ import annotations

import json
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from localcluster.errors import ClusterError
from localcluster.image_table import ImageRuntime

ROOTFS = "rootfs"
LAYER_TYPES = (
    "application/vnd.oci.image.layer.v1.tar+gzip",
    "application/vnd.docker.image.rootfs.diff.tar.gzip",
)


def _blob(layout: Path, digest: str) -> Path:
    algorithm, _, value = digest.partition(":")
    return layout / "blobs" / algorithm / value


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def manifest_of(layout: Path) -> tuple[dict[str, Any], Path]:
    """(the image config, the one gzip layer's blob) of the layout's only manifest."""
    try:
        index = _read_json(layout / "index.json")
        (entry,) = index["manifests"]
        manifest = _read_json(_blob(layout, entry["digest"]))
        config = _read_json(_blob(layout, manifest["config"]["digest"]))
        (layer,) = manifest["layers"]
    except (OSError, ValueError, KeyError) as error:
        raise ClusterError(
            f"localcluster: {layout} is not a single-manifest, single-layer OCI layout "
            f"({error}); build it with `python -m scripts.build_image`"
        ) from error
    if layer.get("mediaType") not in LAYER_TYPES:
        raise ClusterError(
            f"localcluster: the layer of {layout} is {layer.get('mediaType')}, not a gzip tar"
        )
    return config, _blob(layout, layer["digest"])


def _inside_keeping_modes(member: tarfile.TarInfo, destination: str) -> tarfile.TarInfo:
    return tarfile.tar_filter(member, destination).replace(mode=member.mode, deep=False)


def unpack(layer: Path, destination: Path) -> Path:
    """The layer unpacked at `destination`, once: a finished directory is reused, and of two
    sessions unpacking at the same time the first rename wins and the other's copy goes."""
    if destination.is_dir():
        return destination
    scratch = Path(tempfile.mkdtemp(prefix=f".{destination.name}-", dir=destination.parent))
    try:
        scratch.chmod(0o755)  # the image's /, walked by the container's non-root user
        with tarfile.open(layer, "r:gz") as tar:
            # Owners kept by number (the user's home is the user's) and modes as they are
            # (/tmp 1777), as a container runtime unpacks; nothing may land outside `scratch`.
            tar.extractall(scratch, numeric_owner=True, filter=_inside_keeping_modes)  # noqa: S202 - filtered
        try:
            scratch.rename(destination)
        except OSError:
            if not destination.is_dir():
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return destination


def _user(spec: str) -> tuple[int | None, int | None]:
    """`uid[:gid]` of the config; names are not resolved (the image's are numeric)."""
    if not spec:
        return None, None
    user, _, group = spec.partition(":")
    if not user.isdigit() or (group and not group.isdigit()):
        raise ClusterError(f"localcluster: image User {spec!r} is not numeric (uid[:gid])")
    return int(user), int(group) if group else None


def image_runtime(image_directory: Path) -> ImageRuntime:
    """The image built into `image_directory` (its `oci` layout) as an image-table entry."""
    config, layer = manifest_of(image_directory / "oci")
    settings = config.get("config") or {}
    env = dict(variable.split("=", 1) for variable in settings.get("Env") or [] if "=" in variable)
    user, group = _user(str(settings.get("User") or ""))
    return ImageRuntime(
        root=unpack(layer, image_directory / ROOTFS),
        env=env,
        user=user,
        group=group,
        entrypoint=tuple(settings.get("Entrypoint") or ()),
        working_dir=str(settings.get("WorkingDir") or "/"),
    )
