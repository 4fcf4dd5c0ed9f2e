"""Sizes: one parser for claims, PVs, budgets and class parameters, and one printer."""

import time

import pytest

from provisioner.objects.quantities import (
    QuantityTooLarge,
    format_bytes,
    parse_size,
    quantity_to_bytes,
)


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


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("9223372036854775807", 2**63 - 1),
        ("7Ei", 7 * 1024**6),
        ("0.5", 1),
        (".5Ki", 512),
        ("12e-3", 1),
        ("1e-999999", 1),
        ("1e-99999999999999999999", 1),
        ("0e99999999999999999999", 0),
        ("0.000", 0),
        ("1.00000000000000000000000000001Ki", 1025),
    ],
)
def test_quantities_at_the_edges_are_exact(text: str, expected: int) -> None:
    assert quantity_to_bytes(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "9223372036854775808",
        "8Ei",
        "1e19",
        "0.001e22",
        "1e5000",
        "999999999999e999987",
        "1e99999999999999999999",
        "1" * 1000,
        "10000000P",
    ],
)
def test_sizes_above_int64_are_refused_at_once_naming_the_limit(text: str) -> None:
    """The API server bounds only binary-suffixed quantities: `1e5000` reaches us, and must be
    refused from its text, before any arithmetic (999999999999e999987 took seconds)."""
    started = time.process_time()
    with pytest.raises(
        QuantityTooLarge, match=r"above the largest size accepted, 9223372036854775807 bytes"
    ):
        quantity_to_bytes(text)
    assert time.process_time() - started < 0.05


def test_a_long_number_is_refused_and_the_error_shows_it_cut_short() -> None:
    text = "0" * 5000 + "1"
    with pytest.raises(ValueError, match=r"is longer than 1000 characters") as error:
        quantity_to_bytes(text)
    assert len(str(error.value)) < 200


def test_parse_size_names_the_key_and_the_limit() -> None:
    with pytest.raises(ValueError, match=r"^maxSize: '1e30' is above the largest size accepted"):
        parse_size("1e30", "maxSize")
