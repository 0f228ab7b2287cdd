import pytest

from emu.soc.units import format_quantity, parse_quantity


@pytest.mark.parametrize(
    ("text", "dimension", "integer", "expected"),
    [
        ("648 MHz", "Hz", False, 648e6),
        ("800e6", "Hz", False, 800e6),
        (800_000_000, "Hz", False, 800e6),
        ("128KiB", "bytes", True, 131072),
        ("128 kB", "bytes", True, 128_000),
        ("1.5 KiB", "bytes", True, 1536),
        ("100 ns", "ps", True, 100_000),
        ("2 us", "ps", True, 2_000_000),
        ("12.8 GB/s", "bytes/s", False, 12.8e9),
        ("32 B/cycle", "bytes/cycle", False, 32.0),
        (7, "count", True, 7),
        ("7", "count", True, 7),
        (2**62 + 1, "count", True, 2**62 + 1),
    ],
)
def test_parse_quantity_accepts_units_of_the_dimension(text, dimension, integer, expected):
    value = parse_quantity(text, dimension, integer)
    assert value == expected
    assert isinstance(value, int) is integer


@pytest.mark.parametrize(
    ("text", "dimension", "integer", "message"),
    [
        ("128KiB", "Hz", False, "not a unit of Hz"),
        ("3 parsecs", "ps", True, "not a unit of ps"),
        ("1.3 B", "bytes", True, "whole number"),
        (1.5, "count", True, "whole number"),
        (True, "count", True, "boolean"),
        ("fast", "Hz", False, "expected a number"),
        ("inf", "Hz", False, "expected a number"),
        (float("nan"), "Hz", False, "finite"),
        ("5 MHz", "count", True, "not a unit of count"),
        ([1], "count", True, "got list"),
    ],
)
def test_parse_quantity_rejects_wrong_units_and_types(text, dimension, integer, message):
    with pytest.raises(ValueError, match=message):
        parse_quantity(text, dimension, integer)


def test_format_quantity_picks_readable_units():
    assert format_quantity(131072, "bytes") == "128 KiB"
    assert format_quantity(100, "bytes") == "100 B"
    assert format_quantity(648e6, "Hz") == "648 MHz"
    assert format_quantity(12.8e9, "bytes/s") == "12.8 GB/s"
    assert format_quantity(2_000_000, "ps") == "2 us"
    assert format_quantity(5, "count") == "5"
    assert format_quantity(9, "cycles") == "9 cycles"
