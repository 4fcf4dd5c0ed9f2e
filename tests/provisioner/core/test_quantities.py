"""Sizes: one parser for claims, PVs, budgets and class parameters, and one printer."""

import pytest

from provisioner.core.quantities import format_bytes, parse_size, quantity_to_bytes


@pytest.mark.parametrize(
    ("text", "expected"),
    [("+1Gi", 1024**3), ("1e3", 1000), ("1.5Ki", 1536), ("1m", 1), ("2Pi", 2 * 1024**5)],
)
def test_quantities(text: str, expected: int) -> None:
    assert quantity_to_bytes(text) == expected


@pytest.mark.parametrize(
    ("size", "shown"),
    [(0, "0"), (1024**3, "1Gi"), (10 * 1024**3, "10Gi"), (1536, "1536"), (1000, "1000")],
)
def test_format_bytes_is_exact(size: int, shown: str) -> None:
    assert format_bytes(size) == shown
    assert quantity_to_bytes(shown) == size


def test_parse_size_names_the_key() -> None:
    assert parse_size("1Mi", "k") == 1024**2
    with pytest.raises(ValueError, match=r"^k: 'x' is not a Kubernetes quantity: write one"):
        parse_size("x", "k")
    with pytest.raises(ValueError, match=r"^k: must be a quantity string"):
        parse_size(5, "k")
