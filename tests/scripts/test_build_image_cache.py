"""The image cache: sessions that start together build an image of the same inputs once."""

from __future__ import annotations

import json
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
