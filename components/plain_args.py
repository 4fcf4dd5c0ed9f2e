"""The components' own args hold resolved values: an Output in one of them would be rendered
as the text "Calling __str__ on an Output[T] is not supported" into an object's name at `up`.
Refused here, before any resource is declared, with the way that does take Outputs."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pulumi


def _outputs_in(value: Any, where: str) -> list[str]:
    if isinstance(value, pulumi.Output):
        return [where]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        found: list[str] = []
        for item in dataclasses.fields(value):
            found += _outputs_in(getattr(value, item.name), f"{where}.{item.name}")
        return found
    if isinstance(value, Mapping):
        found = []
        for key, item in value.items():
            found += _outputs_in(item, f"{where}[{key!r}]")
        return found
    if isinstance(value, list | tuple):
        found = []
        for index, item in enumerate(value):
            found += _outputs_in(item, f"{where}[{index}]")
        return found
    return []


def refuse_outputs(args: object) -> None:
    """Raises TypeError naming every field of `args` that holds an Output."""
    found = _outputs_in(args, type(args).__name__)
    if found:
        raise TypeError(
            f"{', '.join(found)}: an Output where a plain value is needed; these args take "
            "resolved values. Pass Outputs to LocalPathStorage, the Pulumi package's component "
            "(docs/pulumi-package.md), which resolves them before it checks them"
        )
