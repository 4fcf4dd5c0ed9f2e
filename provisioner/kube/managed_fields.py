"""Cutting `"managedFields":[...]` out of JSON text before it is decoded.

`metadata.managedFields` is 40-50% of the bytes of a claim or a volume as the apiserver sends
them, and nothing here reads it; no API option leaves it out. Decoding it with the C scanner
of `json` and throwing the tree away was a quarter of the start-up's CPU at 10,000 volumes.
Skipping its text costs a fraction of that: `str.find` for the member's name, then one regular
expression (possessive, so linear) that steps over strings and everything but brackets to the
bracket that closes the array.

Only a member is cut: the quote that opens the name must follow a `{` or a `,`. A quote there
cannot be an escaped one inside a string (that would follow a backslash), and in valid JSON it
cannot close a string either (the name would then stand outside any string), so it opens the
member's name. Text that is not that, or not valid JSON, is passed on untouched; the decoder
sees exactly what it would have seen, less those members. Strings are stepped over whole, so
brackets and escaped quotes inside them (fieldsV1's `"k:{\\"type\\":\\"Ready\\"}"` keys) do
not count.
"""

from __future__ import annotations

import re

MEMBER = '"managedFields":['
# Everything up to the next bracket that is not inside a string: runs of other characters and
# whole strings, taken possessively so that a failure never backtracks. It stops early at a
# string that does not end in the text at hand.
_TO_NEXT_BRACKET = re.compile(r'(?:[^"\[\]]++|"(?:[^"\\]++|\\.)*+")*+')


def array_end(text: str, start: int) -> int | None:
    """The index just past the `]` that closes the array whose `[` is at `start - 1`, or None
    when the text at hand ends first."""
    # The usual case, in C: no bracket opens and no backslash stands before the first `]`, so
    # every quote before it opens or closes a string, and an even number of them leaves it
    # outside any string.
    close = text.find("]", start)
    if (
        close >= 0
        and text.find("[", start, close) < 0
        and text.find("\\", start, close) < 0
        and text.count('"', start, close) % 2 == 0
    ):
        return close + 1
    depth = 1
    position = start
    while True:
        matched = _TO_NEXT_BRACKET.match(text, position)  # it matches the empty string too
        position = matched.end() if matched else position
        if position >= len(text):
            return None
        bracket = text[position]
        position += 1
        if bracket == "[":
            depth += 1
        elif bracket == "]":
            depth -= 1
            if depth == 0:
                return position
        else:  # a quote: a string that goes on past the text at hand
            return None


class ManagedFieldsCutter:
    """Feed text as it arrives; each call returns what is safe to pass on, holding back at most
    a member that has not ended yet (or a tail that could begin one)."""

    def __init__(self) -> None:
        self._pending = ""

    def feed(self, text: str, *, final: bool = False) -> str:
        text = self._pending + text
        self._pending = ""
        pieces: list[str] = []
        emitted = 0  # text[:emitted] is decided
        search = 0
        while True:
            found = text.find(MEMBER, search)
            if found < 0:
                break
            search = found + 1
            before = text[found - 1] if found > 0 else ""
            if before not in (",", "{"):
                continue
            end = array_end(text, found + len(MEMBER))
            # After `{"managedFields":[...]` the next character says whether a comma goes too.
            if end is None or (before == "{" and end == len(text)):
                if final:
                    break
                # Hold back from the character before: the next call needs it to decide.
                pieces.append(text[emitted : found - 1])
                self._pending = text[found - 1 :]
                return "".join(pieces)
            if before == ",":
                cut_from, cut_to = found - 1, end
            elif text[end] in ",}":
                cut_from, cut_to = found, end + 1 if text[end] == "," else end
            else:  # whitespace after the array: leave it (the apiserver writes none)
                continue
            pieces.append(text[emitted:cut_from])
            emitted = cut_to
            search = cut_to
        if not final:
            # A member may begin in this tail; keep it, and the character before it.
            keep_from = max(emitted, len(text) - len(MEMBER))
            self._pending = text[keep_from:]
            pieces.append(text[emitted:keep_from])
        else:
            pieces.append(text[emitted:])
        return "".join(pieces)
