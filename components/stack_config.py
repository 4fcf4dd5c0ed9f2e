"""The stack's config as the program receives it, through Pulumi's public API only.

`pulumi.Config` reads a key but cannot list keys, nor say whether a value was set as a secret.
Both come from the stack's config file (`<stackConfigDir>/Pulumi.<stack>.yaml`), where every
`pulumi config set` lands: its keys in the project's namespace, so a misspelt one is refused
instead of ignored, and those stored encrypted (`secure:`, anywhere inside the value), so no
secret is ever written in plaintext to a ConfigMap or the state. Values themselves are read
with `pulumi.Config.get`, already decrypted and with Pulumi.yaml's defaults applied.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import yaml

from components import naming
from components.settings import KNOWN_KEYS


@dataclass(frozen=True)
class StackConfig:
    """The values of the project's namespace, and which keys the stack file holds as secrets."""

    values: dict[str, str]
    """Full key (`local-path-storage:replicas`) -> the engine's string (JSON text if structured)."""
    secret_keys: frozenset[str]
    """Keys (without the namespace) whose value is a secret."""


def read_stack_config() -> StackConfig:
    """Every key the program knows, plus every key of its namespace in the stack file."""
    stack_keys = stack_file_keys()
    own = pulumi.Config(naming.CONFIG_NAMESPACE)
    values = {}
    for key in sorted(KNOWN_KEYS | stack_keys.keys()):
        value = own.get(key)
        if value is not None:
            values[f"{naming.CONFIG_NAMESPACE}:{key}"] = value
    secrets = frozenset(key for key, secret in stack_keys.items() if secret)
    return StackConfig(values=values, secret_keys=secrets)


def stack_file_keys() -> dict[str, bool]:
    """Key (without the namespace) -> whether it is a secret, for the project namespace's keys
    of the current stack's file; empty when there is no file (a stack without config)."""
    root = pulumi.get_root_directory()
    if not root:
        return {}
    project = _load_yaml(Path(root) / "Pulumi.yaml")
    stack_file = (
        Path(root) / str(project.get("stackConfigDir", ".")) / f"Pulumi.{pulumi.get_stack()}.yaml"
    )
    config = _load_yaml(stack_file).get("config") or {}
    prefix = f"{naming.CONFIG_NAMESPACE}:"
    return {
        full_key[len(prefix) :]: _holds_secret(value)
        for full_key, value in config.items()
        if isinstance(full_key, str) and full_key.startswith(prefix)
    }


def _load_yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    return document if isinstance(document, dict) else {}


def _holds_secret(value: object) -> bool:
    """`pulumi config set --secret` stores `{secure: <ciphertext>}`, with `--path` deep inside
    a structured value; the engine then treats the whole top-level key as secret."""
    if isinstance(value, dict):
        if set(value) == {"secure"}:
            return True
        return any(_holds_secret(item) for item in value.values())
    if isinstance(value, list):
        return any(_holds_secret(item) for item in value)
    return False
