"""Reading stack config values, and the one error type for a value that cannot be deployed.

Messages show values as JSON (strings quoted), so `"data"` and `data` are never confused, and
name the key the way `pulumi config set --path` spells it.
"""

from __future__ import annotations

import difflib
import json
import re
from typing import TypeVar

from components import naming

T = TypeVar("T")

DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
"""Kubernetes' DNS-1123 subdomain (object names, name prefixes), without its length limit."""


class SettingsError(ValueError):
    """A stack config value that cannot be deployed; `str()` is the one line users see."""

    def __init__(self, key_path: str, message: str) -> None:
        self.key_path = key_path
        self.message = message
        super().__init__(f"stack config {naming.CONFIG_NAMESPACE}:{key_path}: {message}")


def show(value: object) -> str:
    """A value as it appears in messages: JSON, so strings are quoted and nothing is ambiguous."""
    return json.dumps(value)


def unknown_key(name: str, known: tuple[str, ...]) -> str:
    """The message for a key that is not one of `known`, suggesting the closest."""
    close = difflib.get_close_matches(name, known, n=1)
    return (
        f"unknown key; did you mean {close[0]}?"
        if close
        else f"unknown key; known keys: {', '.join(known)}"
    )


def string(key: str, value: object) -> str:
    if not isinstance(value, str):
        raise SettingsError(key, f"must be a string, got {show(value)}")
    return value


def strings(key: str, value: object) -> list[str]:
    if not isinstance(value, list):
        raise SettingsError(key, f"must be a list of strings, got {show(value)}")
    return [string(f"{key}[{index}]", item) for index, item in enumerate(value)]


def boolean(key: str, value: object) -> bool:
    # `pulumi config set --path` without --type stores "true"/"false" as strings.
    if isinstance(value, bool):
        return value
    if value in ("true", "false"):
        return value == "true"
    raise SettingsError(key, f"must be true or false, got {show(value)}")


def one_of(key: str, value: object, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise SettingsError(key, f"must be one of {', '.join(choices)}; got {show(value)}")
    return str(value)


def decode_structured(key: str, text: str, expected: type[T], what: str) -> T:
    """A structured top-level value, which the engine passes as JSON text."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = text
    if not isinstance(value, expected):
        raise SettingsError(
            key,
            f"must be {what} (edit it in the stack file or with `pulumi config set --path`), "
            f"got {show(value)}",
        )
    return value
