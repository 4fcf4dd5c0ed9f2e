"""Hot reload of the mounted ConfigMap: config.json, setup, teardown, helperPod.yaml.

kubelet updates a mounted ConfigMap by swapping the `..data` symlink, so the files change
atomically but without any notification we could subscribe to from a pod. A stat of four
files once a second costs nothing and bounds the delay; rancher polls every 30 s.
An invalid new version is refused (logged, counted, reported to `on_invalid`) and the last
valid bundle stays in force: a typo in the ConfigMap must never stop provisioning.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from provisioner.config import ConfigBundle, ConfigError, load_config_directory

log = logging.getLogger(__name__)

Fingerprint = tuple[tuple[str, int, int, int], ...]


def _fingerprint(paths: list[Path]) -> Fingerprint:
    entries = []
    for path in [*paths, paths[0].parent / "..data"]:
        try:
            # stat follows the symlinks kubelet swaps, so a new ..data target shows up here.
            st = path.stat()
            entries.append((str(path), st.st_ino, st.st_mtime_ns, st.st_size))
        except OSError:
            entries.append((str(path), -1, -1, -1))
    return tuple(entries)


class ConfigWatcher:
    """Holds the config in force and replaces it when the mounted files change validly."""

    def __init__(
        self,
        config_path: Path,
        helper_pod_file: Path | None,
        *,
        allow_unsafe_helper_template: bool,
        on_reloaded: Callable[[ConfigBundle], None],
        on_invalid: Callable[[ConfigError], None],
        interval_seconds: float = 1.0,
    ) -> None:
        self._config_path = config_path
        self._helper_pod_file = helper_pod_file
        self._allow_unsafe = allow_unsafe_helper_template
        self._on_reloaded = on_reloaded
        self._on_invalid = on_invalid
        self._interval = interval_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="config-watch", daemon=True)
        self._paths = [
            config_path,
            config_path.parent / "setup",
            config_path.parent / "teardown",
            helper_pod_file or config_path.parent / "helperPod.yaml",
        ]
        # The first load must succeed: without any valid config there is nothing to keep.
        self._fingerprint = _fingerprint(self._paths)
        self.current = self._load()
        self._last_refused: Fingerprint | None = None

    def _load(self) -> ConfigBundle:
        return load_config_directory(
            self._config_path.parent,
            config_file=self._config_path,
            helper_pod_file=self._helper_pod_file,
            allow_unsafe_helper_template=self._allow_unsafe,
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def check_now(self) -> None:
        """Reloads if the files changed since the last look; called by the loop and by tests."""
        fingerprint = _fingerprint(self._paths)
        if fingerprint in (self._fingerprint, self._last_refused):
            return
        try:
            bundle = self._load()
        except ConfigError as error:
            # Remember the refused version so one bad edit yields one warning, not one a second.
            self._last_refused = fingerprint
            log.warning("refused new configuration, keeping the last valid one: %s", error)
            self._on_invalid(error)
            return
        self._fingerprint = fingerprint
        self._last_refused = None
        if bundle == self.current:
            return
        self.current = bundle
        log.info("configuration reloaded from %s", self._config_path.parent)
        self._on_reloaded(bundle)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.check_now()
            except Exception:
                log.exception("config watch failed; will look again in %.0f s", self._interval)
