"""Kubernetes resource quantities, parsed exactly and rounded up like ``resource.Quantity``.

Internally every quantity is an integer in the resource's base unit: cpu in millicores, memory, storage and
disk in bytes, bandwidth in bits/s, counts (pods, extended resources) as plain integers. Parsing uses exact
rational arithmetic, so ``"0.1"`` cpu is 100m and never 99m; a fractional base unit rounds up (Kubernetes'
``Value()`` and ``MilliValue()`` do the same), so nothing is silently truncated.

On the wire cpu is written with the ``m`` suffix (``"2500m"``) and every other resource as a plain integer,
so that encode → decode is the identity.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Annotated

from pydantic import PlainSerializer, PlainValidator, WithJsonSchema

from schemas.exceptions import QuantityError

__all__ = [
    "MAX_QUANTITY",
    "STANDARD_RESOURCES",
    "ResourceList",
    "Resources",
    "format_quantity",
    "is_extended_resource",
    "parse_quantity",
    "parse_resource_list",
    "validate_resource_name",
]

MAX_QUANTITY = 2**62
"""Largest base-unit value eyrie accepts; leaves int64 headroom for sums over a node's pods."""

STANDARD_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage", "bandwidth", "disk", "pods"})

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
# Kubernetes' grammar: a signed decimal number, then a binary suffix, a decimal SI suffix or an exponent.
_QUANTITY = re.compile(r"^([+-]?)(\d+\.?\d*|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$")
_QUALIFIED = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LONGEST = 64
"""Characters in a quantity string: 2^62 has 19 digits, so more is garbage (and Python refuses to convert an
integer of over 4,300 digits, which would surface as an error without the resource's name)."""
_MILLI = re.compile(r"^\d{1,19}m$")
_HUGEPAGES = re.compile(r"^hugepages-\d+(Ki|Mi|Gi)$")


def is_extended_resource(name: str) -> bool:
    """Extended resources (``nvidia.com/gpu``) are domain-qualified and counted in whole units."""
    return "/" in name and not name.startswith("kubernetes.io/")


def validate_resource_name(name: str, *, field: str | None = None) -> str:
    if name in STANDARD_RESOURCES or _HUGEPAGES.match(name):
        return name
    if _QUALIFIED.match(name) and "." in name.split("/", 1)[0]:
        return name
    raise QuantityError(
        f"unknown resource name {name!r} (expected one of {', '.join(sorted(STANDARD_RESOURCES))}, "
        "hugepages-<size>, or a domain-qualified extended resource such as nvidia.com/gpu)",
        field=field or name,
    )


def _exact_value(raw: object, field: str) -> Fraction:
    if isinstance(raw, bool):
        raise QuantityError(f"expected a quantity, got a boolean {raw!r}", field=field)
    if isinstance(raw, int):
        value = Fraction(raw)
    elif isinstance(raw, float):
        if math.isnan(raw) or math.isinf(raw):
            raise QuantityError(f"quantity must be finite, got {raw!r}", field=field)
        # repr() is the shortest decimal that round-trips, so 0.1 means one tenth, not 0.1000000000000000055.
        value = Fraction(repr(raw))
    elif isinstance(raw, str):
        text = raw.strip()
        if len(text) > _LONGEST:
            raise QuantityError(f"quantity of {len(text):,} characters: at most {_LONGEST}", field=field)
        match = _QUANTITY.match(text)
        if match is None:
            lowered = text.lower()
            if lowered in {"nan", "+nan", "-nan", "inf", "+inf", "-inf", "infinity"}:
                raise QuantityError(f"quantity must be finite, got {raw!r}", field=field)
            raise QuantityError(
                f"cannot parse quantity {raw!r} (expected e.g. 500m, 2, 1.5, 1Gi, 10G, 1e3)", field=field
            )
        sign, number, suffix = match.groups()
        value = Fraction(number)
        if suffix is None or suffix == "":
            pass
        elif suffix in _BINARY:
            value *= _BINARY[suffix]
        elif suffix in _DECIMAL:
            value *= _DECIMAL[suffix]
        else:  # exponent form, e.g. e3 / E-2
            exponent = int(suffix[1:])
            if abs(exponent) > 30:
                raise QuantityError(f"quantity {raw!r} is out of range", field=field)
            value *= Fraction(10) ** exponent
        if sign == "-":
            value = -value
    else:
        raise QuantityError(f"expected a quantity string or number, got {type(raw).__name__}", field=field)
    if value < 0:
        raise QuantityError(f"quantity {raw!r} is negative", field=field)
    return value


def parse_quantity(raw: object, resource: str = "memory", *, field: str | None = None) -> int:
    """Parse one quantity into the base unit of `resource` (millicores for cpu), rounding up."""
    where = field or resource
    # Fast paths for the wire forms eyrie itself writes (plain integers, "2500m"); same results as below.
    if type(raw) is int and 0 <= raw <= MAX_QUANTITY:
        result = raw * 1000 if resource == "cpu" else raw
        if result <= MAX_QUANTITY:
            return result
    elif type(raw) is str and resource == "cpu" and _MILLI.match(raw):
        result = int(raw[:-1])
        if result <= MAX_QUANTITY:
            return result
    value = _exact_value(raw, where)
    if resource == "cpu":
        value *= 1000
    elif is_extended_resource(resource) and value.denominator != 1:
        raise QuantityError(f"extended resource quantity {raw!r} must be a whole number", field=where)
    result = math.ceil(value)
    if result > MAX_QUANTITY:
        raise QuantityError(f"quantity {raw!r} exceeds the maximum of 2^62", field=where)
    return result


def format_quantity(value: int, resource: str) -> str | int:
    """The wire form of a base-unit value: ``"2500m"`` for cpu, the plain integer otherwise."""
    return f"{value}m" if resource == "cpu" else value


class Resources(dict[str, int]):
    """A parsed resource list: base units (cpu in millicores). Validating one again keeps its values,
    whereas a plain dict is read as Kubernetes notation (``{"cpu": 4}`` is four cores). So a model built
    from another model's resources (``Binding(requests=pod.effective_requests)``) never rescales them."""

    __slots__ = ()


def parse_resource_list(raw: object, *, field: str | None = None) -> Resources:
    """``{"cpu": "500m", "memory": "1Gi"}`` → ``{"cpu": 500, "memory": 1073741824}``; zero entries kept."""
    if isinstance(raw, Resources):
        return Resources(raw)  # a copy: models must not share a mutable dict
    if raw is None:
        return Resources()
    if not isinstance(raw, Mapping):
        raise QuantityError(
            f"expected a mapping of resource name to quantity, got {type(raw).__name__}", field=field
        )
    parsed = Resources()
    for name, quantity in raw.items():
        where = f"{field}.{name}" if field else str(name)
        if not isinstance(name, str):
            raise QuantityError("resource names must be strings", field=where)
        validate_resource_name(name, field=where)
        parsed[name] = parse_quantity(quantity, name, field=where)
    return parsed


def _serialize_resource_list(value: dict[str, int]) -> dict[str, str | int]:
    return {name: format_quantity(amount, name) for name, amount in value.items()}


ResourceList = Annotated[
    Resources,
    PlainValidator(parse_resource_list),
    PlainSerializer(_serialize_resource_list, when_used="json"),
    WithJsonSchema(
        {
            "type": "object",
            "description": "resource name → Kubernetes quantity (cpu '500m' or cores, memory '1Gi' or bytes)",
            "additionalProperties": {"anyOf": [{"type": "string"}, {"type": "number", "minimum": 0}]},
        }
    ),
]
"""A pydantic field type: resource name → base-unit integer, parsed from Kubernetes notation."""
