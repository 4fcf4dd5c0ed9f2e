"""Hot reload of the mounted ConfigMap: config.json, setup, teardown, helperPod.yaml.

kubelet updates a mounted ConfigMap by swapping the `..data` symlink, so the files change
atomically but without any notification we could subscribe to from a pod. A stat of four
files once a second costs nothing and bounds the delay; rancher polls every 30 s.
An invalid new version is refused (logged, counted, reported to `on_invalid`) and the last
valid bundle stays in force: a typo in the ConfigMap must never stop provisioning.
An invalid version at start-up leaves the watcher without a config (`waiting_for` says why)
rather than failing: as a Deployment, exiting would be a crash loop that hides the reason, so
the process stays up, not ready, and the first valid version is reported to `on_reloaded`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from provisioner.configuration.config import ConfigBundle, ConfigError, load_config_directory

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


class NoValidConfigError(RuntimeError):
    """The config was asked for before any valid version was loaded."""


class ConfigSource(Protocol):
    """The config in force, as whoever works on it reads it at each decision."""

    @property
    def current(self) -> ConfigBundle: ...


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
        self._current: ConfigBundle | None = None
        self.waiting_for: ConfigError | None = None
        """Why there is no config in force yet: the start-up version was invalid."""
        self._last_refused: Fingerprint | None = None
        fingerprint = _fingerprint(self._paths)
        try:
            self._current = self._load()
        except ConfigError as error:
            # `()` matches no real fingerprint, so any change is looked at again.
            self._fingerprint: Fingerprint = ()
            self._last_refused = fingerprint
            self.waiting_for = error
        else:
            self._fingerprint = fingerprint

    def has_config(self) -> bool:
        return self._current is not None

    @property
    def current(self) -> ConfigBundle:
        """The config in force; `NoValidConfigError` before the first valid version (see
        `has_config()`): callers that work on it start only once there is one."""
        bundle = self._current
        if bundle is None:
            raise NoValidConfigError(f"no valid configuration loaded yet: {self.waiting_for}")
        return bundle

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
            if self._current is None:
                self.waiting_for = error
                log.warning("refused new configuration, still none valid: %s", error)
            else:
                log.warning("refused new configuration, keeping the last valid one: %s", error)
            self._on_invalid(error)
            return
        self._fingerprint = fingerprint
        self._last_refused = None
        if bundle == self._current:
            return
        self._current = bundle
        self.waiting_for = None
        log.info("configuration reloaded from %s", self._config_path.parent)
        self._on_reloaded(bundle)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.check_now()
            except Exception:
                log.exception("config watch failed; will look again in %.0f s", self._interval)
