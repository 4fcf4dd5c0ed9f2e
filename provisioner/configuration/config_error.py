"""The one error type for a configuration problem (config.json, the scripts, helperPod.yaml),
in a module of its own so that every module checking a piece of the configuration can raise it
without importing the config model (which imports them)."""

from __future__ import annotations


class ConfigError(ValueError):
    """A config problem: `key_path` says where, `message` what is wrong and what to do."""

    def __init__(self, key_path: str, message: str, *, source: str | None = None) -> None:
        self.key_path, self.message, self.source = key_path, message, source
        prefix = f"{source}: " if source else ""
        super().__init__(f"{prefix}{key_path}: {message}" if key_path else f"{prefix}{message}")
