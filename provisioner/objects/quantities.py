"""Kubernetes quantities ("1Gi", "500M", "1.5e3"): the one parser and printer of sizes.

Claims' requests, PV capacities, path budgets (config.json `capacity`) and the StorageClass
`minSize`/`maxSize` parameters are all read here, so a size means the same thing everywhere.
Sizes are whole bytes rounded up, as resource.Quantity.Value() does; a negative size is
refused (no size we read may be negative).
"""

from __future__ import annotations

import re
from functools import lru_cache

_QUANTITY = re.compile(
    r"\+?([0-9]*)(?:\.([0-9]*))?(Ki|Mi|Gi|Ti|Pi|Ei|[eE]([+-]?)([0-9]+)|[numkMGTPE])?"
)
_BINARY_POWERS = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL_EXPONENTS = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_PRINTED_SUFFIXES = (("Ei", 6), ("Pi", 5), ("Ti", 4), ("Gi", 3), ("Mi", 2), ("Ki", 1))
QUANTITY_EXAMPLES = "such as 100Gi, 500M or 1073741824"
MAX_SIZE_BYTES = 2**63 - 1
"""The largest size we accept: what Kubernetes stores as an int64 quantity. The API server
bounds only the binary-suffixed ones, so a claim may ask for 1e5000 bytes; such a size is
refused from its text, before any arithmetic (whose cost grows with the exponent)."""
MAX_SIZE_TEXT = f"{MAX_SIZE_BYTES} bytes (2^63-1, about 8Ei)"
_MAX_DIGITS = len(str(MAX_SIZE_BYTES))
_MAX_EXPONENT_DIGITS = 6
"""An exponent with more digits says more than any size we accept, or less than one byte."""
_MAX_TEXT = 1000
"""Characters of a quantity, at most (the API server prints them far shorter): what is
parsed, and kept in the cache, stays small."""


class QuantityTooLarge(ValueError):  # noqa: N818 (a ValueError like the others; reads as one)
    """A well-formed quantity above MAX_SIZE_BYTES."""


@lru_cache(maxsize=1024)  # a cluster's volumes and claims repeat a handful of sizes
def quantity_to_bytes(quantity: str) -> int:
    """A Kubernetes quantity in bytes, rounded up as Quantity.Value(); QuantityTooLarge above
    MAX_SIZE_BYTES, ValueError for anything else that is not a size. The bound is checked on
    the text's digits and exponent first, so the arithmetic that follows is always small."""
    text = quantity.strip()
    if len(text) > _MAX_TEXT:
        raise ValueError(f"{_shown(quantity)} is longer than {_MAX_TEXT} characters")
    match = _QUANTITY.fullmatch(text)
    if match is None or not (match.group(1) or match.group(2)):
        raise ValueError(f"{_shown(quantity)} is not a Kubernetes quantity")
    whole, fraction, suffix = match.group(1), match.group(2) or "", match.group(3) or ""
    digits = (whole + fraction).lstrip("0")
    if not digits:
        return 0
    binary = _BINARY_POWERS.get(suffix, 0)
    if match.group(5) is not None:
        exponent_digits = match.group(5).lstrip("0") or "0"
        negative = match.group(4) == "-"
        if len(exponent_digits) > _MAX_EXPONENT_DIGITS:
            if negative:
                return 1  # a positive number of bytes below one: rounded up
            raise _too_large(quantity)
        exponent = -int(exponent_digits) if negative else int(exponent_digits)
    else:
        exponent = _DECIMAL_EXPONENTS.get(suffix, 0)
    # value = int(digits) * 10**(exponent - len(fraction)) * 1024**binary, and its leading
    # digit stands at 10**magnitude: 1024**binary >= 10**(3 * binary).
    scale = exponent - len(fraction)
    magnitude = len(digits) - 1 + scale
    if magnitude + 3 * binary >= _MAX_DIGITS:
        raise _too_large(quantity)
    if magnitude + 1 + _MAX_DIGITS < 0:
        return 1  # far below one byte (1024**6 < 10**19): rounded up
    numerator: int = int(digits) * 1024**binary * 10 ** max(scale, 0)
    divisor: int = 10 ** max(-scale, 0)
    size = -(-numerator // divisor)  # rounded up
    if size > MAX_SIZE_BYTES:
        raise _too_large(quantity)
    return size


def _too_large(quantity: str) -> QuantityTooLarge:
    return QuantityTooLarge(
        f"{_shown(quantity)} is above the largest size accepted, {MAX_SIZE_TEXT}"
    )


def _shown(quantity: str) -> str:
    """The quantity as an error shows it: a tenant's text, cut short."""
    return repr(quantity if len(quantity) <= 40 else quantity[:40] + "...")


def parse_size(value: object, key: str) -> int:
    """A size written by an admin (config or class parameter): bytes, or a ValueError whose
    text names the key and an example, for the caller to wrap in its own error type."""
    if not isinstance(value, str):
        raise ValueError(f"{key}: must be a quantity string {QUANTITY_EXAMPLES} (got {value!r})")
    try:
        return quantity_to_bytes(value)
    except QuantityTooLarge as error:
        raise ValueError(f"{key}: {error}") from None
    except ValueError:
        raise ValueError(
            f"{key}: {value!r} is not a Kubernetes quantity: write one {QUANTITY_EXAMPLES}"
        ) from None


def format_bytes(size: int) -> str:
    """The shortest exact quantity for a byte count ("10Gi", "1500"), as the API prints it."""
    if size > 0:
        for suffix, power in _PRINTED_SUFFIXES:
            if size % 1024**power == 0:
                return f"{size // 1024**power}{suffix}"
    return str(size)
