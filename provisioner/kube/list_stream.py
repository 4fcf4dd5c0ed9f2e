"""Decoding a list response one item at a time, as it arrives.

A list of 10,000 volumes served from the apiserver's watch cache is one response of about
18 MiB (the cache ignores `limit`). `json.loads` of that holds the whole body and its whole
object tree, several times the body, at once; the informer needs one object at a time, long
enough to make its record. This reads the body in chunks and decodes each element of the
top-level `items` array on its own with the C scanner of the standard `json` module, so at any
moment only a chunk and the item being decoded are alive besides the records.

The other top-level members (`metadata` with the list's resourceVersion and continue token,
`kind`, `apiVersion`) are small and kept; they may come before or after `items`.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator
from typing import Any

from provisioner.kube.managed_fields import ManagedFieldsCutter
from provisioner.kube.watch_stream import RawResponse, discard, release

CHUNK_BYTES = 256 * 1024
_WHITESPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


class ListDecodeError(ValueError):
    """The body is not a JSON object, or it ended early."""


class ListDecoder:
    """`for item in decoder.items()`: each element of `items`; once they are exhausted,
    `decoder.fields` holds the response's other top-level members."""

    def __init__(self, chunks: Iterator[bytes], *, without_managed_fields: bool = False) -> None:
        """With `without_managed_fields`, `managedFields` members are cut from the text before
        it is decoded (see `managed_fields`): the items come out without them, for less work."""
        self.fields: dict[str, Any] = {}
        self._chunks = chunks
        self._cutter = ManagedFieldsCutter() if without_managed_fields else None
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self._buffer = ""
        self._position = 0
        self._ended = False

    def items(self) -> Iterator[Any]:
        self._expect("{")
        if self._peek() == "}":
            return
        while True:
            key = self._value()
            if not isinstance(key, str):
                raise ListDecodeError(f"a member name that is not a string: {key!r}")
            self._expect(":")
            if key == "items" and self._peek() == "[":
                self._position += 1
                yield from self._array_elements()
            else:
                self.fields[key] = self._value()
            if self._next_of(",}") == "}":
                return

    def _array_elements(self) -> Iterator[Any]:
        if self._peek() == "]":
            self._position += 1
            return
        while True:
            yield self._value()
            if self._next_of(",]") == "]":
                return

    def _value(self) -> Any:
        self._peek()
        while True:
            try:
                value, end = _DECODER.raw_decode(self._buffer, self._position)
            except json.JSONDecodeError as e:
                if not self._read_more():
                    raise ListDecodeError(f"list response: {e}") from e
                continue
            # A number ending at the buffer's end may go on in the next chunk.
            if end >= len(self._buffer) and self._read_more():
                continue
            self._position = end
            return value

    def _next_of(self, expected: str) -> str:
        character = self._peek()
        if character not in expected:
            raise ListDecodeError(f"list response: expected one of {expected!r}, got {character!r}")
        self._position += 1
        return character

    def _expect(self, character: str) -> None:
        self._next_of(character)

    def _peek(self) -> str:
        # The apiserver writes no whitespace between items: skip the regex then (twice an item).
        if self._position < len(self._buffer) and self._buffer[self._position] not in " \t\n\r":
            return self._buffer[self._position]
        while True:
            match = _WHITESPACE.match(self._buffer, self._position)
            self._position = match.end() if match else self._position
            if self._position < len(self._buffer):
                return self._buffer[self._position]
            if not self._read_more():
                raise ListDecodeError("list response ended early")

    def _read_more(self) -> bool:
        """Append at least CHUNK_BYTES more (or the rest) to the unread rest of the buffer;
        False at the end. The apiserver sends about one HTTP chunk per item, so taking them one
        by one would cut most items in two and decode each twice."""
        text = ""
        while not text and not self._ended:
            pieces: list[bytes] = []
            size = 0
            while size < CHUNK_BYTES and not self._ended:
                chunk = next(self._chunks, None)
                self._ended = chunk is None
                if chunk:
                    pieces.append(chunk)
                    size += len(chunk)
            text = self._utf8.decode(b"".join(pieces), final=self._ended)
            if self._cutter is not None:
                # It may hold all of it back (a member not ended yet): then read on.
                text = self._cutter.feed(text, final=self._ended)
        if not text:
            return False
        self._buffer = self._buffer[self._position :] + text
        self._position = 0
        return True


def iter_list_items(
    response: RawResponse, fields: dict[str, Any], *, without_managed_fields: bool = False
) -> Iterator[Any]:
    """Each item of a list response as it is decoded; `fields` receives the other top-level
    members once the items are exhausted. The connection goes back to the pool at the end."""
    chunks = response.stream(CHUNK_BYTES, decode_content=True)
    decoder = ListDecoder(chunks, without_managed_fields=without_managed_fields)
    try:
        yield from decoder.items()
    except BaseException:
        # Half read (a decode error, or the caller stopped): never reuse that connection.
        discard(response)
        raise
    for _ in chunks:  # the body's last newline, so the connection is clean for its next use
        pass
    release(response)
    fields.update(decoder.fields)
