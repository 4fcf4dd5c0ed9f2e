"""The managedFields cutter against tricky JSON, cut into pieces anywhere."""

import itertools
import json
import random
from typing import Any

import pytest

from provisioner.kube.managed_fields import MEMBER, ManagedFieldsCutter, array_end

ENTRY = {
    "manager": 'kube-controller-manager "v1.36" ]}[',
    "operation": "Update",
    "apiVersion": "v1",
    "time": "2026-11-23T12:00:00Z",
    "fieldsType": "FieldsV1",
    "fieldsV1": {
        "f:metadata": {"f:annotations": {".": {}, 'f:a"]': {}}},
        'k:{"type":"Ready"}': {".": {}, "f:status": {}},
        "f:status": {"f:phase": {}},
    },
    "subresource": "status",
}
TRICKY = [
    '"managedFields":[',
    '\\"managedFields\\":[1]',
    "ends with a backslash \\",
    "\\\\",
    "]]]",
    "[[[",
    '{"managedFields":["x"]}',
    "\u2603 \u00e9",
    ',"managedFields":[',
]


def without_managed_fields(value: Any) -> Any:
    """What the cutter promises: every member named managedFields whose value is an array is
    gone (at any depth; the API only has it in metadata)."""
    if isinstance(value, dict):
        return {
            key: without_managed_fields(item)
            for key, item in value.items()
            if not (key == "managedFields" and isinstance(item, list))
        }
    if isinstance(value, list):
        return [without_managed_fields(item) for item in value]
    return value


def cut(text: str, pieces: list[int] | None = None) -> str:
    """Feed `text` cut at the given offsets (none: whole)."""
    cutter = ManagedFieldsCutter()
    bounds = [0, *(pieces or []), len(text)]
    out = [cutter.feed(text[a:b]) for a, b in itertools.pairwise(bounds)]
    out.append(cutter.feed("", final=True))
    return "".join(out)


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def item(name: str, managed: list[Any] | None, where: str = "last") -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name,
        "annotations": {f"note-{i}": text for i, text in enumerate(TRICKY)},
        "labels": {"managedFields": "[not an array]"},
    }
    if managed is not None:
        if where == "first":
            metadata = {"managedFields": managed, **metadata}
        elif where == "only":
            metadata = {"managedFields": managed}
        else:
            metadata["managedFields"] = managed
    return {"metadata": metadata, "spec": {"path": "/data/]}", "list": [[1, [2]], {"a": []}]}}


DOCUMENT = {
    "kind": "PersistentVolumeList",
    "metadata": {"resourceVersion": "9"},
    "items": [
        item("last", [ENTRY, ENTRY]),
        item("first", [ENTRY], "first"),
        item("only", [ENTRY], "only"),
        item("absent", None),
        item("empty", []),
        item("nested arrays", [[["]", "["], []], {"x": [1, 2]}, "]"]),
    ],
}


def test_the_members_go_and_nothing_else_changes() -> None:
    text = compact(DOCUMENT)
    result = cut(text)
    assert json.loads(result) == without_managed_fields(DOCUMENT)
    assert result.count("managedFields") == compact(without_managed_fields(DOCUMENT)).count(
        "managedFields"
    )
    # Annotations that only look like the member are kept, byte for byte.
    for note in TRICKY:
        assert compact(note) in result


def test_cut_at_every_offset_gives_the_same_text() -> None:
    text = compact(DOCUMENT["items"][0]) + compact(DOCUMENT["items"][1])  # type: ignore[index]
    whole = cut(text)
    for offset in range(len(text) + 1):
        assert cut(text, [offset]) == whole, offset


@pytest.mark.parametrize("seed", range(20))
def test_random_chunkings_give_the_same_text(seed: int) -> None:
    chooser = random.Random(seed)
    text = compact(DOCUMENT)
    offsets = sorted(chooser.sample(range(1, len(text)), chooser.randint(1, 200)))
    assert cut(text, offsets) == cut(text)


def test_one_character_at_a_time() -> None:
    text = compact(DOCUMENT)
    assert json.loads(cut(text, list(range(1, len(text))))) == without_managed_fields(DOCUMENT)


def test_text_that_is_not_a_member_passes_untouched() -> None:
    for text in [
        # Spaced JSON (the apiserver writes none): no member matches the compact name.
        json.dumps(DOCUMENT),
        # Not after `{` or `,`: inside a string, or not JSON at all.
        '["managedFields":[1]]',
        '"managedFields":[1]',
        '{"a":"\\"managedFields":[1]"}',
        # Whitespace after the array of the first member: left alone.
        '{"managedFields":[1] ,"a":1}',
        # Never closed: the rest is passed on at the end.
        '{"a":1,"managedFields":[{"b":"]',
        '{"a":1,"managedFields":[[]',
    ]:
        assert cut(text) == text, text
        assert cut(text, list(range(1, len(text)))) == text, text


def test_first_only_and_last_members_keep_the_commas_right() -> None:
    assert cut('{"managedFields":[1],"a":2}') == '{"a":2}'
    assert cut('{"managedFields":[1]}') == "{}"
    assert cut('{"a":2,"managedFields":[1]}') == '{"a":2}'
    assert cut('{"a":2,"managedFields":[1],"b":3}') == '{"a":2,"b":3}'
    assert cut('[{"managedFields":[]},{"x":{"managedFields":[[]]}}]') == '[{},{"x":{}}]'


def test_nothing_held_back_longer_than_needed() -> None:
    cutter = ManagedFieldsCutter()
    start = '{"a":"' + "x" * 100 + '",' + '"managedFie'
    # Only a tail as long as the member's name is held back: it could begin one.
    assert cutter.feed(start) == start[: -len(MEMBER)]
    # Once it has begun, what came before it goes on and the member is held back until its
    # array ends; then it is gone.
    assert cutter.feed('lds":[{"m":"x"') == 'xxxx"'
    assert cutter.feed("}]") == ""
    assert cutter.feed(',"b":2}') == ""
    assert cutter.feed("", final=True) == ',"b":2}'


@pytest.mark.parametrize(
    ("text", "start", "end"),
    [
        ("[]", 1, 2),
        ('[["]"],"[",{"a":"\\"]"}]x', 1, 23),
        ('["\\\\"]', 1, 6),
        ("[[1]", 1, None),
        ('["abc', 1, None),
        ('["abc\\', 1, None),
        ("[", 1, None),
    ],
)
def test_array_end(text: str, start: int, end: int | None) -> None:
    assert array_end(text, start) == end
