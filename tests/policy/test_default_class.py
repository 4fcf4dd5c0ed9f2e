from __future__ import annotations

from policy.default_class import check_stack
from tests.policy.resources import deployment, storage_class


def test_one_default_class_passes() -> None:
    assert check_stack([storage_class("a", default=True), storage_class("b"), deployment()]) == []


def test_a_second_default_class_is_reported_with_all_of_them() -> None:
    classes = [storage_class(name, default=True) for name in ("a", "b", "c")]
    found = check_stack(classes)
    assert [urn for _, urn in found] == ["urn::sc::b", "urn::sc::c"]
    assert found[0][0].startswith("StorageClass b is a default class, and so are a, b, c")
    assert "on one class only" in found[0][0]
