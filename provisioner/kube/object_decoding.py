"""Decoding list and watch responses into the objects an informer makes its records from.

`ObjectDecoding(SomeStruct)` decodes with msgspec into a Struct that names only the members
its records read; msgspec's C parser skips the rest (managedFields, most of the spec, status
conditions) without making a Python object of them. `DictObjects()` decodes into plain dicts,
for an informer that keeps whole objects (helper pods), with managedFields dropped.

A list is read whole, then split into its items without decoding them (`msgspec.Raw`), and each
item is decoded when the informer asks for it: only one item's objects are alive at a time
besides the records, as with a streaming decoder, for the price of holding the body (about 1.8
KiB an object; the apiserver's watch cache answers a first list in one response whatever its
`limit`).

Lists are not asked for gzip: it reads a tenth of the bytes and saved about 0.5 s of our CPU
at 50,000 volumes, but the apiserver's compressing of two 90 MB lists on a busy 2-CPU control
plane cost more wall time than that (ready in 5.0-9.2 s against 4.6-4.7 s uncompressed).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import msgspec

from provisioner.kube.watch_stream import RawResponse, discard, release

T = TypeVar("T")

READ_BYTES = 1024 * 1024


class ObjectDecodeError(ValueError):
    """A response that is not the JSON its request promises (the informer retries)."""


class ListMeta(msgspec.Struct, rename="camel"):
    resource_version: str = ""
    continue_token: str = msgspec.field(default="", name="continue")


class _RawList(msgspec.Struct):
    metadata: ListMeta = msgspec.field(default_factory=ListMeta)
    items: list[msgspec.Raw] | None = None


def _empty_object() -> msgspec.Raw:
    return msgspec.Raw(b"{}")


class _RawEvent(msgspec.Struct):
    type: str = ""
    object: msgspec.Raw = msgspec.field(default_factory=_empty_object)


class _Versioned(msgspec.Struct):
    """What a BOOKMARK carries: only its resourceVersion."""

    metadata: ListMeta = msgspec.field(default_factory=ListMeta)


@dataclass(frozen=True)
class WatchEvent(Generic[T]):
    type: str
    """ADDED, MODIFIED, DELETED, BOOKMARK or ERROR."""
    object: T | None
    """The object, for ADDED, MODIFIED and DELETED."""
    resource_version: str = ""
    status: dict[str, Any] | None = None
    """The Status an ERROR event carries."""

    @property
    def error_code(self) -> int | None:
        code = (self.status or {}).get("code")
        return code if isinstance(code, int) else None


class ObjectDecoding(Generic[T]):
    """Decodes a collection's objects into `object_type`, which must carry
    `metadata.resourceVersion` as `metadata.resource_version` (the Structs of the records)."""

    def __init__(self, object_type: type[T]) -> None:
        self.object_type = object_type
        self._object = msgspec.json.Decoder(object_type)
        self._list = msgspec.json.Decoder(_RawList)
        self._event = msgspec.json.Decoder(_RawEvent)
        self._versioned = msgspec.json.Decoder(_Versioned)
        self._status = msgspec.json.Decoder(dict[str, Any])

    def decode(self, data: bytes | bytearray | memoryview | msgspec.Raw) -> T:
        try:
            return self._object.decode(data)
        except msgspec.DecodeError as e:
            raise ObjectDecodeError(f"a {self._type_name} that cannot be read: {e}") from e

    def read_list(self, response: RawResponse) -> tuple[Iterator[T], ListMeta]:
        """The response's items, each decoded as it is taken, and the list's metadata. The
        connection goes back to the pool once the body is read."""
        body = read_body(response)
        try:
            listed = self._list.decode(body)
        except msgspec.DecodeError as e:
            raise ObjectDecodeError(f"a {self._type_name} list that cannot be read: {e}") from e
        return (self.decode(item) for item in listed.items or ()), listed.metadata

    def event(self, line: bytes) -> WatchEvent[T]:
        """One line of a watch response."""
        try:
            raw = self._event.decode(line)
            data = raw.object
            if raw.type == "ERROR":
                return WatchEvent(raw.type, None, status=self._status.decode(data))
            version = self._versioned.decode(data).metadata.resource_version
            if raw.type == "BOOKMARK":
                return WatchEvent(raw.type, None, version)
        except msgspec.DecodeError as e:
            raise ObjectDecodeError(f"a watch event that cannot be read: {e}") from e
        return WatchEvent(raw.type, self.decode(data), version)

    @property
    def _type_name(self) -> str:
        return getattr(self.object_type, "__name__", str(self.object_type))


class DictObjects(ObjectDecoding[dict[str, Any]]):
    """Whole objects as dicts, without metadata.managedFields (often half of an object's bytes
    and never read)."""

    def __init__(self) -> None:
        super().__init__(dict[str, Any])

    def decode(self, data: bytes | bytearray | memoryview | msgspec.Raw) -> dict[str, Any]:
        obj = super().decode(data)
        metadata = obj.get("metadata")
        if isinstance(metadata, dict):
            metadata.pop("managedFields", None)
        return obj


def read_body(response: RawResponse) -> bytearray:
    """The whole (decompressed) body; the connection goes back to the pool after it, and is
    closed instead if the read fails half-way."""
    body = bytearray()
    try:
        for chunk in response.stream(READ_BYTES, decode_content=True):
            body += chunk
    except BaseException:
        discard(response)
        raise
    release(response)
    return body
