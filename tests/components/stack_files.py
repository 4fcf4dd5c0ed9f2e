"""The stack config the engine would hand the program, built from Pulumi.yaml and stacks/.

The engine passes config as one flat bag: `namespace:key` -> string, with structured values
as JSON text, and the project's typed defaults filled in for keys the stack does not set.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from components.naming import CONFIG_NAMESPACE

ROOT = Path(__file__).resolve().parents[2]
STACKS = ("dev", "staging", "prod")


def project_file() -> dict[str, Any]:
    project: dict[str, Any] = yaml.safe_load((ROOT / "Pulumi.yaml").read_text(encoding="utf-8"))
    return project


def stack_file(stack: str) -> dict[str, Any]:
    path = ROOT / "stacks" / f"Pulumi.{stack}.yaml"
    content: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return content


def as_engine_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def engine_config(stack_config: dict[str, Any]) -> dict[str, str]:
    """Project defaults overlaid with the given stack config (full keys), as the engine does."""
    raw = {
        f"{CONFIG_NAMESPACE}:{key}": as_engine_value(declaration["default"])
        for key, declaration in project_file()["config"].items()
    }
    raw.update({key: as_engine_value(value) for key, value in stack_config.items()})
    return raw


def stack_engine_config(stack: str) -> dict[str, str]:
    return engine_config(stack_file(stack)["config"])
