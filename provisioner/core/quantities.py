"""Kubernetes quantities ("1Gi", "500M", "1.5e3"): the one parser and printer of sizes.

Claims' requests, PV capacities, path budgets (config.json `capacity`) and the StorageClass
`minSize`/`maxSize` parameters are all read here, so a size means the same thing everywhere.
Sizes are whole bytes rounded up, as resource.Quantity.Value() does; a negative size is
refused (no size we read may be negative).
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal

_QUANTITY = re.compile(
    r"\+?([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+|[numkMGTPE])?"
)
_BINARY_POWERS = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL_EXPONENTS = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_PRINTED_SUFFIXES = (("Ei", 6), ("Pi", 5), ("Ti", 4), ("Gi", 3), ("Mi", 2), ("Ki", 1))
QUANTITY_EXAMPLES = "such as 100Gi, 500M or 1073741824"


def quantity_to_bytes(quantity: str) -> int:
    """A Kubernetes quantity in bytes, rounded up as Quantity.Value(); ValueError otherwise."""
    match = _QUANTITY.fullmatch(quantity.strip())
    if match is None:
        raise ValueError(f"{quantity!r} is not a Kubernetes quantity")
    number, suffix = Decimal(match.group(1)), match.group(2) or ""
    if suffix in _BINARY_POWERS:
        value = number * 1024 ** _BINARY_POWERS[suffix]
    elif suffix[:1] in ("e", "E") and len(suffix) > 1:
        value = number.scaleb(int(suffix[1:]))
    else:
        value = number.scaleb(_DECIMAL_EXPONENTS.get(suffix, 0))
    return int(value.to_integral_value(rounding=ROUND_CEILING))


def parse_size(value: object, key: str) -> int:
    """A size written by an admin (config or class parameter): bytes, or a ValueError whose
    text names the key and an example, for the caller to wrap in its own error type."""
    if not isinstance(value, str):
        raise ValueError(f"{key}: must be a quantity string {QUANTITY_EXAMPLES} (got {value!r})")
    try:
        return quantity_to_bytes(value)
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
