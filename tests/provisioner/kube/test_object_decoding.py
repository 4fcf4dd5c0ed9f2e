"""Decoding list and watch responses into Structs or dicts (object_decoding)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest

from provisioner.kube.object_decoding import (
    DictObjects,
    ObjectDecodeError,
    ObjectDecoding,
)
from tests.provisioner.kube.fakes import FakeResponse


class Meta(msgspec.Struct, rename="camel"):
    name: str = ""
    resource_version: str = ""


class Thing(msgspec.Struct):
    metadata: Meta = msgspec.field(default_factory=Meta)
    size: str = ""


def thing(name: str, size: str = "1Gi", rv: str = "1") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "resourceVersion": rv, "managedFields": [{"manager": "x"}]},
        "size": size,
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def test_a_list_is_decoded_into_structs_with_its_metadata_and_the_connection_released() -> None:
    response = FakeResponse(
        {
            "kind": "ThingList",
            "metadata": {"resourceVersion": "42", "continue": "token"},
            "items": [thing("a"), thing("b", "2Gi")],
        }
    )
    items, metadata = ObjectDecoding(Thing).read_list(response)
    assert response.released and not response.closed
    assert metadata.resource_version == "42" and metadata.continue_token == "token"
    assert list(items) == [
        Thing(Meta("a", "1"), "1Gi"),
        Thing(Meta("b", "1"), "2Gi"),
    ]


def test_an_empty_list_or_one_without_items_has_no_items() -> None:
    bodies: list[dict[str, Any]] = [{"metadata": {"resourceVersion": "7"}, "items": None}, {}]
    for body in bodies:
        items, _ = ObjectDecoding(Thing).read_list(FakeResponse(body))
        assert list(items) == []
    assert ObjectDecoding(Thing).read_list(FakeResponse({"items": []}))[1].resource_version == ""


def test_dict_objects_are_whole_but_without_managed_fields() -> None:
    items, _ = DictObjects().read_list(FakeResponse({"items": [thing("a")]}))
    expected = thing("a")
    del expected["metadata"]["managedFields"]
    assert list(items) == [expected]


@pytest.mark.parametrize(
    "body",
    [b'{"items": [{"metadata": {}}', b"[1, 2]", b"", b'{"items": [{"size": 3}]}'],
)
def test_a_truncated_malformed_or_mistyped_list_is_a_value_error(body: bytes) -> None:
    response = FakeResponse(chunks=[body[:5], body[5:]])
    with pytest.raises(ObjectDecodeError) as error:
        items, _ = ObjectDecoding(Thing).read_list(response)
        list(items)
    assert isinstance(error.value, ValueError)
    assert "Thing" in str(error.value)


def test_a_read_that_fails_half_way_closes_the_connection() -> None:
    class Broken(FakeResponse):
        def stream(
            self, amt: int | None = None, decode_content: bool | None = None
        ) -> Iterator[bytes]:
            yield b'{"items": ['
            raise OSError("connection reset")

    response = Broken()
    with pytest.raises(OSError, match="reset"):
        ObjectDecoding(Thing).read_list(response)
    assert response.closed


def line(event: dict[str, Any]) -> bytes:
    return json.dumps(event).encode()


def test_watch_events_carry_their_object_and_resource_version() -> None:
    decoding = ObjectDecoding(Thing)
    added = decoding.event(line({"type": "ADDED", "object": thing("a", rv="9")}))
    assert (added.type, added.object, added.resource_version) == (
        "ADDED",
        Thing(Meta("a", "9"), "1Gi"),
        "9",
    )
    deleted = decoding.event(line({"type": "DELETED", "object": thing("a", rv="10")}))
    assert deleted.object is not None and deleted.resource_version == "10"


def test_a_bookmark_carries_only_its_resource_version() -> None:
    event = ObjectDecoding(Thing).event(
        line(
            {"type": "BOOKMARK", "object": {"kind": "Thing", "metadata": {"resourceVersion": "20"}}}
        )
    )
    assert (event.type, event.object, event.resource_version) == ("BOOKMARK", None, "20")


def test_an_error_event_carries_its_status_and_code() -> None:
    status = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
    event = ObjectDecoding(Thing).event(line({"type": "ERROR", "object": status}))
    assert (event.object, event.status, event.error_code) == (None, status, 410)
    odd = ObjectDecoding(Thing).event(line({"type": "ERROR", "object": {"code": "x"}}))
    assert odd.error_code is None


@pytest.mark.parametrize("text", [b"not json", b'{"type": "ADDED", "object": {"size": 1}}'])
def test_an_unreadable_watch_event_is_a_value_error(text: bytes) -> None:
    with pytest.raises(ObjectDecodeError):
        ObjectDecoding(Thing).event(text)
