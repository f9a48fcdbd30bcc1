"""Kubernetes quantity parsing: exact, rounding up, and one clear error per kind of bad input."""

import pytest

from schemas.exceptions import QuantityError
from schemas.quantity import format_quantity, parse_quantity, parse_resource_list, validate_resource_name

GI = 2**30

VALID = [
    ("millicores are read as millicores", "500m", "cpu", 500),
    ("whole cores become thousands of millicores", "2", "cpu", 2000),
    ("a decimal core count is exact, not float-rounded", "0.1", "cpu", 100),
    ("a fractional core count rounds up to the next millicore", "0.0001", "cpu", 1),
    ("a float cpu from JSON is read by its shortest decimal form", 0.1, "cpu", 100),
    ("an integer cpu from JSON means cores", 4, "cpu", 4000),
    ("nano cores round up to one millicore", "1n", "cpu", 1),
    ("binary suffix Gi is a power of two", "1Gi", "memory", GI),
    ("decimal suffix G is a power of ten", "10G", "memory", 10 * 10**9),
    ("Ki is 1024 bytes", "1Ki", "memory", 1024),
    ("k is 1000 bytes", "1k", "memory", 1000),
    ("an exponent form is accepted", "1e3", "memory", 1000),
    ("a fractional byte count rounds up like Quantity.Value", "1.5", "memory", 2),
    ("milli bytes round up to a whole byte", "100m", "memory", 1),
    ("a plain integer memory is bytes", 209715200, "memory", 209715200),
    ("a fractional Gi is exact", "1.5Gi", "memory", 3 * GI // 2),
    ("a leading plus sign is allowed", "+2", "cpu", 2000),
    ("a number with a leading dot is allowed", ".5", "cpu", 500),
    ("surrounding white space is ignored", " 2Gi ", "memory", 2 * GI),
    ("zero is a valid quantity", "0", "cpu", 0),
    ("extended resources count whole units", "2", "nvidia.com/gpu", 2),
    ("bandwidth is bits per second with SI suffixes", "10G", "bandwidth", 10**10),
    ("the largest accepted value is 2^62", str(2**62), "memory", 2**62),
]


@pytest.mark.parametrize(("case", "raw", "resource", "expected"), VALID, ids=[c[0] for c in VALID])
def test_valid_quantities_parse_to_base_units(case, raw, resource, expected):
    assert parse_quantity(raw, resource) == expected


INVALID = [
    ("a negative quantity is rejected", "-1", "cpu", "negative"),
    ("a negative number from JSON is rejected", -5, "memory", "negative"),
    ("NaN as a string is rejected", "NaN", "cpu", "finite"),
    ("NaN as a float is rejected", float("nan"), "cpu", "finite"),
    ("infinity as a float is rejected", float("inf"), "memory", "finite"),
    ("infinity as a string is rejected", "inf", "memory", "finite"),
    ("an unknown suffix is rejected", "5Xi", "memory", "cannot parse"),
    ("a lower-case binary suffix is rejected", "1gi", "memory", "cannot parse"),
    ("an empty string is rejected", "", "memory", "cannot parse"),
    ("a value over 2^62 is rejected", "5Ei", "memory", "2^62"),
    ("cores that overflow once in millicores are rejected", str(2**62), "cpu", "2^62"),
    ("an absurd exponent is rejected", "1e400", "memory", "out of range"),
    ("a boolean is not a quantity", True, "cpu", "boolean"),
    ("a list is not a quantity", [1], "cpu", "expected a quantity"),
    ("a fractional extended resource is rejected", "0.5", "nvidia.com/gpu", "whole number"),
]


@pytest.mark.parametrize(("case", "raw", "resource", "message"), INVALID, ids=[c[0] for c in INVALID])
def test_invalid_quantities_fail_naming_the_field(case, raw, resource, message):
    with pytest.raises(QuantityError) as error:
        parse_quantity(raw, resource, field=f"requests.{resource}")
    assert message in str(error.value)
    assert error.value.field == f"requests.{resource}"
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("case", "name", "valid"),
    [
        ("cpu is a standard resource", "cpu", True),
        ("ephemeral-storage is a standard resource", "ephemeral-storage", True),
        ("a vendor-qualified GPU is an extended resource", "nvidia.com/gpu", True),
        ("hugepages of a given size are a resource", "hugepages-2Mi", True),
        ("an unqualified unknown name is rejected", "gpu", False),
        ("a name with a slash but no domain is rejected", "vendor/gpu", False),
        ("an upper-case standard name is rejected", "CPU", False),
    ],
)
def test_resource_names_are_checked(case, name, valid):
    if valid:
        assert validate_resource_name(name) == name
    else:
        with pytest.raises(QuantityError, match="unknown resource name"):
            validate_resource_name(name)


def test_a_resource_list_parses_every_entry_with_its_own_unit():
    assert parse_resource_list({"cpu": "1.5", "memory": "1Gi", "nvidia.com/gpu": 1, "pods": 110}) == {
        "cpu": 1500,
        "memory": GI,
        "nvidia.com/gpu": 1,
        "pods": 110,
    }


def test_a_resource_list_error_names_the_resource():
    with pytest.raises(QuantityError) as error:
        parse_resource_list({"cpu": "1", "memory": "lots"}, field="limits")
    assert error.value.field == "limits.memory"


@pytest.mark.parametrize(("resource", "value"), [("cpu", 2500), ("memory", GI), ("nvidia.com/gpu", 3)])
def test_the_wire_form_parses_back_to_the_same_value(resource, value):
    assert parse_quantity(format_quantity(value, resource), resource) == value
