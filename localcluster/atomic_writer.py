"""Writes a volume's files the way the kubelet's AtomicWriter does, so updates are atomic.

Why: the provisioner hot-reloads its mounted ConfigMap by watching the `..data` symlink
(provisioner/configuration/config_watch.py). A kubelet writes each version of a ConfigMap, Secret,
downward-API or projected volume into a new `..<timestamp>` directory, points a temporary
symlink at it and renames that over `..data` (one atomic step), and each top-level name in the
volume is a symlink `name -> ..data/name`; then the old directory is removed. A reader never
sees half a version, and `..data` changing is the signal.
"""

from __future__ import annotations

import datetime
import posixpath
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

DATA_LINK = "..data"
DIRECTORY_MODE = 0o755

VolumeFile = tuple[str, bytes, int]
"""(path relative to the volume, content, mode)."""


class UnsafeVolumePathError(ValueError):
    """A volume item path that would leave the volume."""


def clean_relative_path(relative: str) -> str:
    cleaned = posixpath.normpath(relative)
    if cleaned.startswith(("/", "..")) or cleaned == ".":
        raise UnsafeVolumePathError(f"volume item path {relative!r} leaves the volume")
    return cleaned


def current_files(directory: Path) -> list[VolumeFile] | None:
    """The files of the version in force (sorted by path), None when nothing was written yet."""
    data = directory / DATA_LINK
    if not data.is_symlink():
        return None
    files = []
    for path in sorted(p for p in data.resolve().rglob("*") if p.is_file()):
        relative = path.relative_to(data.resolve()).as_posix()
        files.append((relative, path.read_bytes(), path.stat().st_mode & 0o7777))
    return files


def write_atomically(directory: Path, files: Sequence[VolumeFile]) -> bool:
    """Makes `files` the volume's content in one atomic swap of `..data`; False (nothing
    written) when they already are."""
    wanted = sorted((clean_relative_path(path), content, mode) for path, content, mode in files)
    if current_files(directory) == wanted:
        return False
    directory.mkdir(parents=True, exist_ok=True)
    data = directory / DATA_LINK
    previous = data.readlink().name if data.is_symlink() else None
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y_%m_%d_%H_%M_%S")
    version = Path(tempfile.mkdtemp(prefix=f"..{stamp}.", dir=directory))
    version.chmod(DIRECTORY_MODE)
    for relative, content, mode in wanted:
        path = version / relative
        for parent in reversed(path.relative_to(version).parents[:-1]):
            (version / parent).mkdir(mode=DIRECTORY_MODE, exist_ok=True)
        path.write_bytes(content)
        path.chmod(mode)
    temporary = directory / "..data_tmp"
    temporary.unlink(missing_ok=True)
    temporary.symlink_to(version.name)
    temporary.rename(data)  # rename(2) replaces the old link atomically
    top_level = {relative.split("/", 1)[0] for relative, _, _ in wanted}
    for name in top_level:
        link = directory / name
        if not link.is_symlink():
            link.symlink_to(f"{DATA_LINK}/{name}")
    for entry in directory.iterdir():
        if not entry.name.startswith("..") and entry.name not in top_level and entry.is_symlink():
            entry.unlink()
    if previous is not None and previous != version.name:
        shutil.rmtree(directory / previous, ignore_errors=True)
    return True
