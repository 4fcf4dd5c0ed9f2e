"""The list decoder against bodies cut into chunks anywhere, as the network cuts them."""

import json
from typing import Any

import pytest

from provisioner.kube import list_stream
from provisioner.kube.list_stream import ListDecodeError, ListDecoder
from tests.provisioner.kube.fakes import FakeResponse


def pieces(data: bytes, size: int) -> list[bytes]:
    return [data[start : start + size] for start in range(0, len(data), size)]


def decode(data: bytes, size: int) -> tuple[list[Any], dict[str, Any]]:
    decoder = ListDecoder(iter(pieces(data, size)))
    return list(decoder.items()), decoder.fields


LIST = {
    "kind": "PersistentVolumeList",
    "apiVersion": "v1",
    "metadata": {"resourceVersion": "42", "continue": "token"},
    "items": [
        {"metadata": {"name": "pvc-1", "annotations": {"note": 'h\u00e9 \u2603 "quoted" ]},'}}},
        {"metadata": {"name": "pvc-2"}, "spec": {"capacity": {"storage": 12345678901}}},
        {"metadata": {"name": "pvc-3"}, "spec": {"ratio": -1.5e3, "flags": [True, False, None]}},
    ],
}


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, 1 << 20])
def test_items_and_fields_come_out_whatever_the_chunking(size: int) -> None:
    """Cuts inside a multi-byte character, a string, a number and between tokens."""
    items, fields = decode(json.dumps(LIST, indent=1, ensure_ascii=False).encode(), size)
    assert items == LIST["items"]
    assert fields == {
        "kind": "PersistentVolumeList",
        "apiVersion": "v1",
        "metadata": LIST["metadata"],
    }


def test_members_after_the_items_and_empty_or_missing_items() -> None:
    body = b'{"items":[{"a":1}],"metadata":{"resourceVersion":"7"}}'
    assert decode(body, 5) == ([{"a": 1}], {"metadata": {"resourceVersion": "7"}})
    assert decode(b'{"items": [ ], "metadata": {}}', 3) == ([], {"metadata": {}})
    assert decode(b'{"items": null}', 3) == ([], {"items": None})
    assert decode(b"{}", 1) == ([], {})


def test_a_number_cut_at_the_end_of_a_chunk_is_read_whole() -> None:
    body = b'{"metadata": {}, "items": [123456, 7]}'
    assert decode(body, body.index(b"456"))[0] == [123456, 7]


@pytest.mark.parametrize(
    "body",
    [b'{"items": [{"a": 1}', b'{"items": [{"a": 1}] "x": 1}', b"[1, 2]", b"", b'{"items": [1 2]}'],
)
def test_a_truncated_or_malformed_body_is_an_error(body: bytes) -> None:
    with pytest.raises(ListDecodeError):
        decode(body, 4)


def test_the_connection_is_released_after_a_whole_list_and_closed_after_a_broken_one() -> None:
    fields: dict[str, Any] = {}
    whole = FakeResponse({"items": [{"a": 1}], "metadata": {"resourceVersion": "3"}})
    assert list(list_stream.iter_list_items(whole, fields)) == [{"a": 1}]
    assert fields["metadata"] == {"resourceVersion": "3"}
    assert whole.released and not whole.closed

    broken = FakeResponse(chunks=[b'{"items": [{"a": 1}, {"b"'])
    with pytest.raises(ListDecodeError):
        list(list_stream.iter_list_items(broken, {}))
    assert broken.closed


@pytest.mark.parametrize("size", [1, 5, 64, 1 << 20])
def test_managed_fields_cut_before_decoding_whatever_the_chunking(size: int) -> None:
    managed = [{"manager": "m", "fieldsV1": {'k:{"type":"Ready"}': {}, "f:a]": {}}}]
    items = [
        {"metadata": {"name": "a", "managedFields": managed}, "spec": {"x": [1, "]"]}},
        {"metadata": {"managedFields": managed, "name": "b"}},
        {"metadata": {"name": "c"}},
    ]
    body = json.dumps(
        {"metadata": {"resourceVersion": "5"}, "items": items}, separators=(",", ":")
    ).encode()
    decoder = ListDecoder(iter(pieces(body, size)), without_managed_fields=True)
    assert list(decoder.items()) == [
        {"metadata": {"name": "a"}, "spec": {"x": [1, "]"]}},
        {"metadata": {"name": "b"}},
        {"metadata": {"name": "c"}},
    ]
    assert decoder.fields == {"metadata": {"resourceVersion": "5"}}
