"""The image cache: sessions that start together build an image of the same inputs once, and
only the most recently used images are kept."""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from pathlib import Path

import pytest

from scripts import build_image


def test_concurrent_sessions_build_the_same_image_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[Path] = []

    def slow_build(directory: Path) -> build_image.BuiltImage:
        built.append(directory)
        time.sleep(0.3)  # the other session asks while this one builds
        directory.mkdir()
        image = build_image.BuiltImage(directory, "sha256:0", "0.1.0", 1, 2)
        (directory / "image.json").write_text(json.dumps(image.summary()))
        return image

    monkeypatch.setattr(build_image, "cache_dir", lambda: tmp_path)
    monkeypatch.setattr(build_image, "ensure_tools", lambda: None)
    monkeypatch.setattr(build_image, "build", slow_build)
    results: list[build_image.BuiltImage] = []
    sessions = [
        threading.Thread(target=lambda: results.append(build_image.image())) for _ in range(3)
    ]
    for session in sessions:
        session.start()
    for session in sessions:
        session.join()
    assert len(built) == 1
    assert {result.directory for result in results} == {built[0]}


def test_only_the_most_recently_used_images_are_kept(tmp_path: Path) -> None:
    for age, key in enumerate(["newest", "recent", "older", "oldest", "building"]):
        directory = tmp_path / f"image-{key}"
        directory.mkdir()
        (directory / "image.json").write_text("{}")
        moment = time.time() - 100 * (age + 1)
        os.utime(directory, (moment, moment))
    scratch = tmp_path / "image-verify-abc"
    scratch.mkdir()
    os.utime(scratch, (0, 0))
    # Another session holds the lock of the oldest one: it is being built, so it stays.
    with (tmp_path / "image-building.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        build_image.prune_images(tmp_path, kept=2)
    left = sorted(path.name for path in tmp_path.iterdir() if path.is_dir())
    assert left == ["image-building", "image-newest", "image-recent", "image-verify-abc"]
