"""At most one default StorageClass in a stack: with two, Kubernetes gives a claim without a
class the newest default, so which one it gets depends on creation order."""

from __future__ import annotations

from collections.abc import Sequence

from policy.resources import (
    DEFAULT_CLASS_ANNOTATIONS,
    STORAGE_CLASS,
    KubeObject,
    Resource,
    is_default_class,
    kube_objects,
)

NAME = "single-default-storage-class"


def check_stack(resources: Sequence[Resource]) -> list[tuple[str, str]]:
    """(message, urn) for every default class after the first, naming all of them. A class
    written twice (a StorageClass and a StorageClassPatch of it) is one class."""
    defaults: dict[str, KubeObject] = {}
    for resource in resources:
        for found in kube_objects(resource):
            if found.kind == STORAGE_CLASS and is_default_class(found):
                defaults.setdefault(found.name, found)
    if len(defaults) < 2:
        return []
    names = ", ".join(defaults)
    return [
        (
            f"{extra.label} is a default class, and so are {names}: keep "
            f'{DEFAULT_CLASS_ANNOTATIONS[0]}: "true" (isDefault: true) on one class only',
            extra.urn,
        )
        for extra in list(defaults.values())[1:]
    ]
