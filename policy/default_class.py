"""At most one default StorageClass in a stack: with two, Kubernetes gives a claim without a
class the newest default, so which one it gets depends on creation order."""

from __future__ import annotations

from collections.abc import Sequence

from policy.resources import DEFAULT_CLASS_ANNOTATIONS, STORAGE_CLASS, Resource, is_default_class

NAME = "single-default-storage-class"


def check_stack(resources: Sequence[Resource]) -> list[tuple[str, str]]:
    """(message, urn) for every default class after the first, naming all of them."""
    defaults = [r for r in resources if r.type == STORAGE_CLASS and is_default_class(r)]
    if len(defaults) < 2:
        return []
    names = ", ".join(r.name for r in defaults)
    return [
        (
            f"StorageClass {extra.name} is a default class, and so are {names}: keep "
            f'{DEFAULT_CLASS_ANNOTATIONS[0]}: "true" (isDefault: true) on one class only',
            extra.urn,
        )
        for extra in defaults[1:]
    ]
