"""Shard checkpoints: a placement shard's complete state at a sequencer offset, as versioned bytes.

A worker that takes a shard over loads the newest checkpoint and replays only the sequencer's tail after
it, instead of the whole partition; the sequencer's history behind the checkpoints can then be deleted.
`encode_checkpoint` and `decode_checkpoint` are the pure halves (no Kafka here); the placement agent
writes and reads them (`streams.runtime.agents.placement`). The format is documented field by field in
docs/checkpoints.md.

The bytes are a magic prefix, then one zlib stream (level 1: the encode blocks placement) of a framed
container: a JSON header and raw binary blobs after it (never pickle). The header holds ``{"format",
"version", "offset", "blobs", "models", "state"}``, where ``state`` holds one section per component, in
this order: the shard, the profile set, the scheduler, the snapshot, the measured usage (or null), the
two-level placer. Each section is ``{attribute: value}`` of the component's own attributes, all of them
except the derived caches and links its `_Component` names (rebuilt or re-linked on restore, never
stored). So a column another change adds to `Snapshot` is carried without touching this module, provided
its value is one of the types `_Encoder` writes; one that cannot be written fails the checkpoint loudly,
naming the attribute.

Values are JSON where JSON is exact, and tagged objects (one key beginning with ``$``) where it is not:
tuples, sets, dicts with non-string keys, non-finite floats, numpy arrays (raw bytes in a blob, memory
layout kept: float sums depend on it), enums, pydantic models (each written once, in the header's model
table, referred to by number), dataclasses and plain objects of eyrie's modules (by class name,
attributes as stored), and references to an object already written (`$r`, numbered in order of first
appearance), so that objects shared between components (a queued pod in the queue, the backoff table and
a Permit wait) stay shared. Profiles are stored as their documents, built again on restore, plus the
state of plugins that keep any (`policies.framework.contract.CheckpointedPlugin`).

Speed is what makes checkpoints usable (the encode pauses placement, the decode is on the takeover path),
so the per-pod tables are written by column, not value by value: a long dict or list is written as its
keys and its values as columns, and a column of numbers is one blob, a column of arrays one blob of their
bytes, a column of dataclass records (`PodRecord`, `PendingPod`) one column per field, a column of models
their numbers. Models are restored by building them from their stored fields without validating them
again (the checkpoint's manifest hash vouches for the bytes, and the fields were valid when written),
for every model class whose fields this module knows how to rebuild exactly; any other class is
validated as the sequencer's codec does.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import gc
import importlib
import math
import struct
import types
import typing
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
from pydantic import BaseModel, TypeAdapter

from policies.framework.profile import Profile, ProfileSet, parse_profile
from policies.snapshot import Snapshot
from policies.usage import NodeUsage
from schemas.codec import model_from_mapping, to_jsonable
from schemas.exceptions import EyrieError
from streams.core.shard import Shard

__all__ = [
    "FORMAT",
    "MAGIC",
    "VERSION",
    "CheckpointError",
    "checkpoint_offset",
    "decode_checkpoint",
    "encode_checkpoint",
    "read_container",
    "write_container",
]

FORMAT = "eyrie.shard-checkpoint"
VERSION = 2
"""Bumped whenever a checkpoint written by this code could be read wrongly by the previous code, or the
other way round (see docs/checkpoints.md): a worker refuses any other version and falls back."""

MAGIC = b"EYRIECK\n"
"""The first bytes of every checkpoint of this framed format (version 1 was a bare zlib stream)."""

_LEVEL = 1
"""zlib level: level 1 is several times faster than the default and compresses these tables nearly as
well (their bulk is blobs of small integers and repeated floats)."""

_COLUMNS_FROM = 16
"""Dicts and lists at least this long are written by column (shorter ones are not worth a column's
header)."""

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

_MODULES = ("schemas.", "policies.", "portraits.", "streams.core.")
"""Where the classes a checkpoint may name live: nothing else is ever imported or instantiated."""


class CheckpointError(EyrieError):
    """A checkpoint that cannot be written or read: corrupt, of another version, or holding a value this
    code cannot represent. `reason` is one line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class _Component:
    """A part of a shard stored as a section: every attribute but `skip` (caches rebuilt empty and links
    to other components, restored by `decode_checkpoint`)."""

    name: str
    skip: frozenset[str]


_SHARD = _Component("shard", frozenset({"scheduler", "placer"}))
_PROFILES = _Component("profiles", frozenset({"_lock"}))
_SCHEDULER = _Component(
    "scheduler",
    # `_skipping`: which plugins each profile skips for a pod, rebuilt on first use (keyed by the profiles'
    # ids, which a restore changes).
    frozenset(
        {
            "profiles",
            "snapshot",
            "_listeners",
            "_listeners_version",
            "_skipping",
            "_row_sum",
            "_row_scratch",
            "_row_failed",
            "_cards",
        }
    ),
)
_SNAPSHOT = _Component(
    "snapshot",
    frozenset(
        {
            "_usage",  # its own section
            "journals",  # readers of a restored snapshot start over (a `RowCursor` sees a new snapshot)
            "_toleration_cache",
            "_taint_counts",
            "_live_rows",
            "_name_rank",
            "label_counters",  # rebuilt from the pods on first use
            "pod_listeners",  # the listening indexes (in `extensions`) are rebuilt from the pods on first use
            "extensions",
        }
    ),
)
_USAGE = _Component(
    "usage",
    frozenset({"snapshot", "_predicted", "_loads", "_portrait_gaps", "_amounts", "_last_load"}),
)
_PLACER = _Component("placer", frozenset({"profiles", "shared", "counters", "on_division"}))
_SECTIONS = (_SHARD, _PROFILES, _SCHEDULER, _SNAPSHOT, _USAGE, _PLACER)

_CACHE_FIELDS: dict[str, frozenset[str]] = {
    "policies.clusters.models:ResourceModels": frozenset({"_capacity_cache"}),
}
"""Dataclass fields that are caches: not stored, and given their default again on restore (a new one goes
here; a cache in a plain object belongs in its component's `skip`)."""


def _attributes(obj: object) -> dict[str, Any]:
    """An object's stored attributes: its ``__dict__`` and every ``__slots__`` entry that is set."""
    found: dict[str, Any] = dict(getattr(obj, "__dict__", {}))
    for klass in type(obj).__mro__:
        slots = klass.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name not in ("__dict__", "__weakref__") and hasattr(obj, name):
                found[name] = getattr(obj, name)
    return found


def _class_name(klass: type) -> str:
    return f"{klass.__module__}:{klass.__qualname__}"


@functools.cache
def _class(name: object) -> type:
    if not isinstance(name, str) or ":" not in name:
        raise CheckpointError(f"not a class name: {name!r}")
    module, qualname = name.split(":", 1)
    if not module.startswith(_MODULES) or "<" in qualname:
        raise CheckpointError(f"class {name} is not one a checkpoint may name")
    try:
        found: Any = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        raise CheckpointError(f"class {name} does not exist in this version") from None
    if not isinstance(found, type):
        raise CheckpointError(f"{name} is not a class")
    return found


def _is_dataclass_type(klass: type) -> bool:
    return "__dataclass_fields__" in klass.__dict__ or any(
        "__dataclass_fields__" in base.__dict__ for base in klass.__mro__
    )


_FieldsOf = tuple[tuple[str, ...], tuple[tuple[str, Callable[[], Any]], ...]]
_FIELDS: dict[type, _FieldsOf] = {}


def _stored_fields(klass: Any) -> _FieldsOf:
    """A dataclass's stored fields, and its cache fields with their factories."""
    found = _FIELDS.get(klass)
    if found is None:
        found = _FIELDS[klass] = _fields_of(klass)
    return found


def _fields_of(klass: Any) -> _FieldsOf:
    caches = _CACHE_FIELDS.get(_class_name(klass), frozenset())
    fields: Any = dataclasses.fields(klass)
    stored = tuple(f.name for f in fields if f.name not in caches)
    factories = tuple((f.name, f.default_factory) for f in fields if f.name in caches)
    return stored, factories


# ------------------------------------------------------------------------------------- the container


def write_container(header: dict[str, Any], blobs: list[bytes]) -> bytes:
    """`MAGIC`, then zlib of: the header's JSON length (4 bytes, big-endian), the header (with the blobs'
    lengths added as ``blobs``), the blobs one after the other."""
    header["blobs"] = [len(blob) for blob in blobs]
    try:
        head = orjson.dumps(header)
    except (TypeError, orjson.JSONEncodeError) as exc:
        where = _unwritable(header)
        at = f" at {where}" if where else ""
        raise CheckpointError(f"cannot write the checkpoint: {exc}{at}") from None
    packer = zlib.compressobj(_LEVEL)
    parts = [MAGIC, packer.compress(struct.pack(">I", len(head))), packer.compress(head)]
    parts += [packer.compress(blob) for blob in blobs]
    parts.append(packer.flush())
    return b"".join(parts)


def _unwritable(value: Any, path: str = "") -> str | None:
    """Where in `value` the first integer orjson refuses is (beyond 64 bits, signed or not: one that
    `_Encoder.value` did not write, a model's field say), to name it when the header cannot be written."""
    if type(value) is int and not _INT64_MIN <= value < 2**64:
        return path or "."
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        found = _unwritable(item, f"{path}.{key}")
        if found is not None:
            return found
    return None


def read_container(data: bytes, *, header_only: bool = False) -> tuple[dict[str, Any], list[memoryview]]:
    """The header and the blobs of a container (`write_container`); only the header (no blobs) when
    `header_only`, which decompresses no further than the header."""
    if not data.startswith(MAGIC):
        if data[:1] == b"\x78":  # a zlib stream: version 1's bare compressed JSON
            raise CheckpointError(f"checkpoint format version 1; this worker reads version {VERSION}")
        raise CheckpointError("not an eyrie checkpoint")
    unpacker = zlib.decompressobj()
    try:
        if header_only:
            start = unpacker.decompress(data[len(MAGIC) :], 4)
            if len(start) < 4:
                raise CheckpointError("corrupt checkpoint (cut short)")
            (length,) = struct.unpack(">I", start)
            body = start + unpacker.decompress(unpacker.unconsumed_tail, length)
        else:
            body = unpacker.decompress(data[len(MAGIC) :])
            if not unpacker.eof:
                raise CheckpointError("corrupt checkpoint (cut short)")
    except zlib.error as exc:
        raise CheckpointError(f"corrupt checkpoint (not zlib: {exc})") from None
    if len(body) < 4:
        raise CheckpointError("corrupt checkpoint (cut short)")
    (length,) = struct.unpack(">I", body[:4])
    if len(body) < 4 + length:
        raise CheckpointError("corrupt checkpoint (cut short)")
    try:
        header = orjson.loads(body[4 : 4 + length])
    except orjson.JSONDecodeError as exc:
        raise CheckpointError(f"corrupt checkpoint (not JSON: {exc})") from None
    if not isinstance(header, dict):
        raise CheckpointError("not an eyrie checkpoint")
    if header_only:
        return header, []
    lengths = header.get("blobs")
    if not isinstance(lengths, list) or not all(type(n) is int and n >= 0 for n in lengths):
        raise CheckpointError("corrupt checkpoint (bad blob lengths)")
    view = memoryview(body)
    blobs, at = [], 4 + length
    for size in lengths:
        blobs.append(view[at : at + size])
        at += size
    if at != len(body):
        raise CheckpointError("corrupt checkpoint (blobs do not add up)")
    return header, blobs


# ------------------------------------------------------------------------------------------- models

_Build = Callable[[Any], Any]
_MISSING: Any = object()


def _plain(value: Any) -> Any:
    return value


def _strip(annotation: Any) -> Any:
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _converter(annotation: Any) -> _Build | None:
    """How to rebuild a field's value from its Python-mode dump that went through JSON: identity for JSON
    values, lists to tuples, dicts to eyrie's dict types, objects to models. None: not known exactly
    (the model is then validated instead)."""
    annotation = _strip(annotation)
    if annotation in (str, int, bool, type(None)):
        return _plain
    if annotation is float:
        return _plain  # finite (every model class built this way forbids inf and nan): JSON keeps it
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        args = typing.get_args(annotation)
        return _plain if all(type(a) in (str, int, bool) or a is None for a in args) else None
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(annotation) if _strip(a) is not type(None)]
        if len(options) != 1:
            return _plain if all(_converter(a) is _plain for a in options) else None
        inner = _converter(options[0])
        if inner is None or inner is _plain:
            return inner
        optional: _Build = inner
        return lambda value: None if value is None else optional(value)
    if origin is list:
        (item,) = typing.get_args(annotation) or (Any,)
        inner = _converter(item)
        if inner is None or inner is _plain:
            return inner
        each: _Build = inner
        return lambda value: [each(v) for v in value] if value else value  # most lists are empty
    if origin is tuple:
        args = typing.get_args(annotation)
        if len(args) == 2 and args[1] is Ellipsis:
            inner = _converter(args[0])
            if inner is None:
                return None
            item_of: _Build = inner
            return lambda value: tuple(item_of(v) for v in value)
        inners = [_converter(a) for a in args]
        if any(i is None for i in inners):
            return None
        return lambda value: tuple(i(v) for i, v in zip(inners, value, strict=True))  # type: ignore[misc]
    if origin is dict:
        key, item = typing.get_args(annotation) or (Any, Any)
        if _strip(key) is not str:
            return None
        inner = _converter(item)
        if inner is None or inner is _plain:
            return inner
        value_of: _Build = inner
        return lambda value: {k: value_of(v) for k, v in value.items()}
    if isinstance(annotation, type):
        if issubclass(annotation, BaseModel):
            return _model_builder(annotation)
        if issubclass(annotation, dict) and annotation.__module__.startswith(_MODULES):
            return annotation  # `Resources`: stored in base units, rebuilt as the dict type
    return None


_BUILDERS: dict[type, _Build | None] = {}


def _model_builder(klass: Any) -> _Build | None:
    """`_build_model`'s builder for the class, made once."""
    if klass not in _BUILDERS:
        _BUILDERS[klass] = _build_model(klass)
    return _BUILDERS[klass]


def _build_model(klass: type[BaseModel]) -> _Build | None:
    """A function building `klass` from its Python-mode dump (defaults left out) without validating, or
    None where a field's type is not one `_converter` rebuilds exactly. Built as pydantic's
    ``model_construct`` builds (every field set), with nested models built the same way."""
    if klass.model_config.get("allow_inf_nan", True) or klass.__pydantic_post_init__ is not None:
        return None  # a float field could hold inf or nan, which JSON does not keep
    if klass.model_config.get("extra") == "allow" or klass.__private_attributes__:
        return None
    converters: list[tuple[str, _Build]] = []
    defaults: list[tuple[str, Any, Callable[[], Any] | None]] = []
    names = tuple(klass.model_fields)
    for name, info in klass.model_fields.items():
        if any(getattr(meta, "allow_inf_nan", None) for meta in info.metadata):
            return None
        if info.annotation is klass:
            return None  # recursive models: validated
        converter = _converter(info.annotation)
        if converter is None:
            return None
        if converter is not _plain:
            converters.append((name, converter))
        factory = info.default_factory
        defaults.append((name, info.default, factory))  # type: ignore[arg-type]
    fields_set = frozenset(names)
    template = {name: _MISSING if factory is not None else default for name, default, factory in defaults}
    factories = [(name, factory) for name, _, factory in defaults if factory is not None]
    setattr_ = object.__setattr__

    def build(raw: Any) -> Any:
        if type(raw) is not dict:
            raise CheckpointError(f"{klass.__name__}: expected an object")
        values = template.copy()  # every field, in the model's order
        values.update(raw)
        if len(values) != len(template):
            raise CheckpointError(f"{klass.__name__}: unknown field")
        for name, factory in factories:
            if values[name] is _MISSING:
                values[name] = factory()
        for name, converter in converters:
            value = values[name]
            if value is not None:
                values[name] = converter(value)
        model = klass.__new__(klass)
        setattr_(model, "__dict__", values)
        setattr_(model, "__pydantic_fields_set__", set(fields_set))
        setattr_(model, "__pydantic_extra__", None)
        setattr_(model, "__pydantic_private__", None)
        return model

    return build


@functools.cache
def _list_adapter(klass: type[BaseModel]) -> TypeAdapter[list[Any]]:
    return TypeAdapter(list[klass])  # type: ignore[valid-type]


# ----------------------------------------------------------------------------------------- encoding


class _Encoder:
    """Values to JSON-able data and blobs (see the module docstring), numbering shared objects as it
    meets them."""

    def __init__(self, links: dict[int, str]) -> None:
        self.links = links
        """Components by identity: a value that is one is written as a link to it (re-linked on restore)."""
        self.seen: dict[int, int] = {}
        self.keep: list[Any] = []  # what `seen` and `models` number, alive until the encoding ends
        self.blobs: list[bytes] = []
        self.models: dict[int, int] = {}
        self.model_list: list[BaseModel] = []

    def blob(self, data: bytes) -> int:
        self.blobs.append(data)
        return len(self.blobs) - 1

    def array(self, array: np.ndarray[Any, Any]) -> list[Any]:
        if array.dtype.hasobject:
            raise CheckpointError(f"cannot checkpoint a numpy array of dtype {array.dtype}")
        # The axes in memory order, outermost first: restored with the same layout (a transposed view, as
        # usage's metric-major tables are, or Fortran order), because numpy's float sums depend on it.
        order = sorted(range(array.ndim), key=lambda axis: -abs(array.strides[axis]))
        dense = np.ascontiguousarray(array.transpose(order))
        return [array.dtype.str, list(array.shape), order, self.blob(dense.tobytes())]

    def model(self, v: BaseModel) -> int:
        number = self.models.get(id(v))
        if number is None:
            number = self.models[id(v)] = len(self.model_list)
            self.model_list.append(v)
        return number

    def value(self, v: Any, *, top: bool = False) -> Any:
        kind = type(v)
        if v is None or kind is bool or kind is str:
            return v
        if kind is int:
            # A sum of quantities (a cluster's allocatable over its nodes) can outgrow 64 bits, which JSON
            # readers do not hold exactly: written as hex digits (which, unlike decimal, Python converts
            # at any length).
            return v if _INT64_MIN <= v <= _INT64_MAX else {"$i": format(v, "x")}
        if kind is float:
            return v if math.isfinite(v) else {"$f": "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")}
        if kind is list:
            if len(v) >= _COLUMNS_FROM:
                return {"$l": self.column(v)}
            return [self.value(item) for item in v]
        if kind is tuple:
            return {"$t": [self.value(item) for item in v]}
        if kind is dict:
            if len(v) >= _COLUMNS_FROM:
                return {"$d": [self.column(list(v)), self.column(list(v.values()))]}
            if all(type(key) is str for key in v):
                return {"$s": {key: self.value(item) for key, item in v.items()}}
            return {"$m": [[self.value(key), self.value(item)] for key, item in v.items()]}
        if kind is set or kind is frozenset:
            items = list(v)
            if items and (all(type(i) is str for i in items) or all(type(i) is int for i in items)):
                items.sort()  # iteration order is the hash seed's: sorted, so equal states write equal bytes
            return {"$set" if kind is set else "$fset": [self.value(item) for item in items]}
        if kind is Counter:
            return {"$c": [[self.value(key), self.value(count)] for key, count in v.items()]}
        if isinstance(v, np.ndarray):
            return {"$nd": self.array(v)}
        if isinstance(v, np.generic):
            return {"$np": self.array(np.asarray(v))}
        if isinstance(v, enum.Enum):
            return {"$e": [_class_name(kind), self.value(v.value)]}
        if isinstance(v, dict) and kind.__module__.startswith(_MODULES):
            # A dict subclass of eyrie's (parsed `Resources`): a value, written whole wherever it appears.
            return {"$dict": [_class_name(kind), self.value(dict(v))]}
        if isinstance(v, BaseModel):
            if not kind.__module__.startswith(_MODULES):
                raise CheckpointError(f"cannot checkpoint a {kind.__module__}.{kind.__qualname__}")
            return {"$M": self.model(v)}
        if not top and id(v) in self.links:
            return {"$link": self.links[id(v)]}
        number = self.seen.get(id(v))
        if number is not None:
            return {"$r": number}
        if not kind.__module__.startswith(_MODULES):
            raise CheckpointError(f"cannot checkpoint a {kind.__module__}.{kind.__qualname__}")
        if _is_dataclass_type(kind) and kind.__dataclass_params__.frozen:
            # A value (an envelope, a load, the default resource models): written whole wherever it
            # appears, so a restored copy and the module's own constant write the same bytes.
            return {"$val": self.dataclass(v)}
        self.seen[id(v)] = len(self.seen)
        self.keep.append(v)
        if kind is Profile:
            return {"$profile": self.profile(v)}
        if _is_dataclass_type(kind):
            return {"$dc": self.dataclass(v)}
        return {"$obj": [_class_name(kind), self.attributes(v, frozenset())]}

    def dataclass(self, v: Any) -> list[Any]:
        stored, _ = _stored_fields(type(v))
        return [_class_name(type(v)), {name: self.value(getattr(v, name)) for name in stored}]

    def column(self, items: list[Any]) -> Any:
        """A list of values as one column: a blob where they are numbers, arrays or models, a column per
        field where they are records of one dataclass; else each value as `value` writes it."""
        kinds = {type(item) for item in items}
        if len(kinds) == 1 and items:
            (kind,) = kinds
            written = self.typed_column(kind, items)
            if written is not None:
                return written
        return {"$cg": [self.value(item) for item in items]}

    def typed_column(self, kind: type, items: list[Any]) -> Any:
        if kind is str:
            return {"$cs": items}
        if kind is int:
            try:
                return {"$ci": self.blob(np.array(items, dtype=np.int64).tobytes())}
            except OverflowError:
                return None
        if kind is float:
            return {"$cf": self.blob(np.array(items, dtype=np.float64).tobytes())}
        if kind is bool:
            return {"$cb": self.blob(np.array(items, dtype=np.bool_).tobytes())}
        if kind is tuple:
            flat = [item for tup in items for item in tup]
            return {"$ct": [self.lengths(items), self.column(flat)]}
        if kind is dict or (issubclass(kind, dict) and kind.__module__.startswith(_MODULES)):
            keys = [key for item in items for key in item]
            values = [value for item in items for value in item.values()]
            name = None if kind is dict else _class_name(kind)
            return {"$cd": [name, self.lengths(items), self.column(keys), self.column(values)]}
        if kind is np.ndarray:
            first = items[0]
            dtype, ndim = first.dtype, first.ndim
            if dtype.hasobject or not all(
                a.dtype == dtype and a.ndim == ndim and a.flags.c_contiguous for a in items
            ):
                return None
            # Each distinct content once (a cold-start pod's load variance is all zeros, for one), then
            # which one each item is; every item is restored as its own copy.
            contents: dict[tuple[tuple[int, ...], bytes], int] = {}
            positions = [contents.setdefault((a.shape, a.tobytes()), len(contents)) for a in items]
            shapes = np.array([shape for shape, _ in contents], dtype=np.int64).reshape(len(contents), ndim)
            data = b"".join([raw for _, raw in contents])
            index = self.blob(np.array(positions, dtype=np.int64).tobytes())
            return {"$ca": [dtype.str, ndim, self.blob(shapes.tobytes()), self.blob(data), index]}
        if issubclass(kind, BaseModel) and kind.__module__.startswith(_MODULES):
            numbers = [self.model(item) for item in items]
            return {"$cm": self.blob(np.array(numbers, dtype=np.int64).tobytes())}
        if kind is Profile or not kind.__module__.startswith(_MODULES) or not _is_dataclass_type(kind):
            return None  # a profile is written from its document (`profile`), wherever it appears
        if not _stored_fields(kind)[0]:
            return None  # no field to count the records by: written one by one
        if kind.__dataclass_params__.frozen:  # type: ignore[attr-defined]
            # Values: each distinct object once, then which one each item is.
            unique: dict[int, int] = {}
            distinct: list[Any] = []
            for item in items:
                if id(item) not in unique:
                    unique[id(item)] = len(distinct)
                    distinct.append(item)
            chosen = np.array([unique[id(item)] for item in items], dtype=np.int64)
            return {"$cv": [self.table(kind, distinct), self.blob(chosen.tobytes())]}
        ids = {id(item) for item in items}
        if len(ids) != len(items) or any(i in self.seen or i in self.links for i in ids):
            return None  # shared records: written one by one, with references
        for item in items:
            self.seen[id(item)] = len(self.seen)
            self.keep.append(item)
        return {"$cr": self.table(kind, items)}

    def table(self, kind: type, items: list[Any]) -> list[Any]:
        stored, _ = _stored_fields(kind)
        columns = {}
        for name in stored:
            try:
                columns[name] = self.column([getattr(item, name) for item in items])
            except CheckpointError as exc:
                raise CheckpointError(f"{kind.__name__}.{name}: {exc.reason}") from None
        return [_class_name(kind), columns]

    def lengths(self, items: list[Any]) -> int:
        return self.blob(np.array([len(item) for item in items], dtype=np.int64).tobytes())

    def profile(self, profile: Profile) -> dict[str, Any]:
        # Plugins are built again from the document; only the state a plugin keeps itself is stored.
        plugins = {
            name: self.value(plugin.checkpoint_state())
            for name, plugin in profile.plugins.items()
            if callable(getattr(plugin, "checkpoint_state", None))
        }
        waiting = profile.handle.waiting
        return {
            "document": self.value(profile.document),
            "plugins": plugins,
            "waiting": None if waiting is None else self.value(waiting),
        }

    def attributes(self, obj: object, skip: frozenset[str]) -> dict[str, Any]:
        stored: dict[str, Any] = {}
        for name, item in _attributes(obj).items():
            if name in skip:
                continue
            try:
                stored[name] = self.value(item, top=True)
            except CheckpointError as exc:
                raise CheckpointError(f"{name}: {exc.reason}") from None
        return stored

    def model_table(self) -> list[Any]:
        """Every model met, in order of first appearance: ``[[class, fast, [dump, ...]], ...]`` by class,
        and a blob of each model's class group. A class `_model_builder` can rebuild is dumped in Python
        mode without defaults (rebuilt without validation); any other in JSON mode (validated)."""
        groups: dict[type, int] = {}
        members: list[list[BaseModel]] = []
        which = []
        for model in self.model_list:
            kind = type(model)
            group = groups.get(kind)
            if group is None:
                group = groups[kind] = len(members)
                members.append([])
            members[group].append(model)
            which.append(group)
        table = []
        for kind, group in groups.items():
            fast = _model_builder(kind) is not None
            models = members[group]
            if fast:
                dumps = _list_adapter(kind).dump_python(models, exclude_defaults=True)
            else:
                dumps = [to_jsonable(model) for model in models]
            table.append([_class_name(kind), fast, dumps])
        return [table, self.blob(np.array(which, dtype=np.int64).tobytes())]


# ----------------------------------------------------------------------------------------- decoding


class _Decoder:
    def __init__(self, links: dict[str, Any], blobs: list[memoryview]) -> None:
        self.links = links
        self.blobs = blobs
        self.objects: list[Any] = []
        self.models: list[Any] = []

    def blob(self, index: object, dtype: type[np.generic]) -> np.ndarray[Any, Any]:
        if type(index) is not int or not 0 <= index < len(self.blobs):
            raise CheckpointError(f"no blob {index!r}")
        return np.frombuffer(self.blobs[index], dtype=dtype)

    def array(self, raw: object) -> np.ndarray[Any, Any]:
        if not isinstance(raw, list) or len(raw) != 4:
            raise CheckpointError("an array must be [dtype, shape, axes, blob]")
        dtype_name, shape, order, index = raw
        dtype = np.dtype(dtype_name)
        if dtype.hasobject:
            raise CheckpointError(f"an array of dtype {dtype} is not allowed")
        stored_shape = tuple(shape[axis] for axis in order)
        dense = self.blob(index, dtype.type).reshape(stored_shape).copy()
        return dense.transpose(np.argsort(order))

    def read_models(self, raw: Any) -> None:
        table, index = raw
        built: list[list[Any]] = []
        for name, fast, dumps in table:
            klass = _class(name)
            if not issubclass(klass, BaseModel):
                raise CheckpointError(f"{name} is not a model")
            if not isinstance(dumps, list):
                raise CheckpointError(f"{name}: models must be a list")
            build = _model_builder(klass) if fast else None
            if fast and build is None:
                raise CheckpointError(f"{name} cannot be built without validation in this version")
            if build is not None:
                built.append([build(dump) for dump in dumps])
            else:
                prefix = klass.__name__
                built.append([model_from_mapping(klass, dump, prefix=prefix) for dump in dumps])
        at = [0] * len(built)
        models = self.models
        for group in self.blob(index, np.int64).tolist():
            models.append(built[group][at[group]])
            at[group] += 1

    def value(self, raw: Any) -> Any:
        if raw is None or isinstance(raw, bool | str | int | float):
            return raw
        if isinstance(raw, list):
            return [self.value(item) for item in raw]
        if not isinstance(raw, dict) or len(raw) != 1:
            raise CheckpointError(f"unexpected value {str(raw)[:80]}")
        ((tag, body),) = raw.items()
        match tag:
            case "$M":
                return self.models[body]
            case "$i":
                if not isinstance(body, str):
                    raise CheckpointError(f"bad integer {str(body)[:80]!r}")
                return int(body, 16)
            case "$f":
                if body not in _FLOATS:
                    raise CheckpointError(f"unknown float {body!r}")
                return _FLOATS[body]
            case "$t":
                return tuple(self.value(item) for item in body)
            case "$s":
                return {key: self.value(item) for key, item in body.items()}
            case "$m":
                return {self.value(key): self.value(item) for key, item in body}
            case "$l":
                return self.column(body)
            case "$d":
                keys = self.column(body[0])
                values = self.column(body[1])
                if len(keys) != len(values):
                    raise CheckpointError("a dict's keys and values differ in length")
                return dict(zip(keys, values, strict=True))
            case "$set":
                return {self.value(item) for item in body}
            case "$fset":
                return frozenset(self.value(item) for item in body)
            case "$c":
                return Counter({self.value(key): self.value(count) for key, count in body})
            case "$nd":
                return self.array(body)
            case "$np":
                return self.array(body)[()]
            case "$e":
                return _class(body[0])(self.value(body[1]))
            case "$link":
                if body not in self.links:
                    raise CheckpointError(f"unknown link {body!r}")
                return self.links[body]
            case "$r":
                if not isinstance(body, int) or not 0 <= body < len(self.objects):
                    raise CheckpointError(f"reference {body!r} to nothing written before it")
                return self.objects[body]
            case "$dict":
                klass = _class(body[0])
                if not issubclass(klass, dict):
                    raise CheckpointError(f"{body[0]} is not a dict")
                return klass(self.value(body[1]))
            case "$profile":
                return self.profile(body)
            case "$dc" | "$obj" | "$val":
                klass = _class(body[0])
                if (tag != "$obj") != _is_dataclass_type(klass) or issubclass(klass, BaseModel):
                    raise CheckpointError(f"class {body[0]} is not stored as {tag}")
                obj = object.__new__(klass)
                if tag != "$val":
                    self.objects.append(obj)  # before its attributes, which may refer back to it
                for name, item in body[1].items():
                    object.__setattr__(obj, name, self.value(item))
                if tag != "$obj":
                    for name, factory in _stored_fields(klass)[1]:
                        object.__setattr__(obj, name, factory())
                return obj
        raise CheckpointError(f"unknown tag {tag!r}")

    def column(self, raw: Any) -> list[Any]:
        if not isinstance(raw, dict) or len(raw) != 1:
            raise CheckpointError(f"unexpected column {str(raw)[:80]}")
        ((tag, body),) = raw.items()
        match tag:
            case "$cg":
                return [self.value(item) for item in body]
            case "$cs":
                if not isinstance(body, list):
                    raise CheckpointError("a column of strings must be a list")
                return body
            case "$ci":
                return self.blob(body, np.int64).tolist()  # type: ignore[no-any-return]
            case "$cf":
                return self.blob(body, np.float64).tolist()  # type: ignore[no-any-return]
            case "$cb":
                return self.blob(body, np.bool_).tolist()  # type: ignore[no-any-return]
            case "$cm":
                models = self.models
                return [models[number] for number in self.blob(body, np.int64).tolist()]
            case "$ct":
                flat = self.column(body[1])
                out, at = [], 0
                for length in self.blob(body[0], np.int64).tolist():
                    out.append(tuple(flat[at : at + length]))
                    at += length
                return out
            case "$cd":
                klass: Any = dict if body[0] is None else _class(body[0])
                if not issubclass(klass, dict):
                    raise CheckpointError(f"{body[0]} is not a dict")
                keys, values = self.column(body[2]), self.column(body[3])
                out, at = [], 0
                for length in self.blob(body[1], np.int64).tolist():
                    out.append(klass(zip(keys[at : at + length], values[at : at + length], strict=True)))
                    at += length
                return out
            case "$ca":
                dtype_name, ndim, shapes_index, data_index, index = body
                dtype = np.dtype(dtype_name)
                if dtype.hasobject:
                    raise CheckpointError(f"an array of dtype {dtype} is not allowed")
                shapes = self.blob(shapes_index, np.int64).reshape(-1, ndim)
                packed = self.blob(data_index, dtype.type)
                sizes = shapes.prod(axis=1)
                if int(sizes.sum()) != len(packed):
                    raise CheckpointError("a column of arrays does not add up")
                positions = self.blob(index, np.int64).tolist()
                if len(shapes) and (shapes == shapes[0]).all():
                    table = packed.reshape((len(shapes), *shapes[0].tolist()))
                    return [table[i].copy() for i in positions]
                ends = np.cumsum(sizes).tolist()
                starts = [0, *ends[:-1]]
                arrays = [
                    packed[start:end].reshape(shape)
                    for start, end, shape in zip(starts, ends, map(tuple, shapes.tolist()), strict=True)
                ]
                return [arrays[i].copy() for i in positions]
            case "$cv":
                distinct = self.table(body[0], numbered=False)
                return [distinct[i] for i in self.blob(body[1], np.int64).tolist()]
            case "$cr":
                return self.table(body, numbered=True)
        raise CheckpointError(f"unknown column tag {tag!r}")

    def table(self, body: Any, *, numbered: bool) -> list[Any]:
        name, columns = body
        klass = _class(name)
        if not _is_dataclass_type(klass) or klass.__dataclass_params__.frozen == numbered:  # type: ignore[attr-defined]
            raise CheckpointError(f"class {name} is not stored as a table")
        stored, caches = _stored_fields(klass)
        if list(columns) != list(stored):
            raise CheckpointError(f"class {name} has other fields in this version")
        objects: list[Any] | None = None
        setattr_ = object.__setattr__
        for field_name, raw in columns.items():
            if objects is None:
                # The records are numbered before their fields are read, as they were written.
                count = self.count(raw)
                objects = [object.__new__(klass) for _ in range(count)]
                if numbered:
                    self.objects.extend(objects)
            values = self.column(raw)
            if len(values) != len(objects):
                raise CheckpointError(f"class {name}: columns differ in length")
            for obj, value in zip(objects, values, strict=True):
                setattr_(obj, field_name, value)
        if objects is None:
            raise CheckpointError(f"class {name}: a table without columns")
        for field_name, factory in caches:
            for obj in objects:
                setattr_(obj, field_name, factory())
        return objects

    def count(self, raw: Any) -> int:
        """How many values a column holds, without reading it (a table numbers its records first)."""
        ((tag, body),) = raw.items()
        match tag:
            case "$cg" | "$cs":
                return len(body)
            case "$ci" | "$cm":
                return len(self.blob(body, np.int64))
            case "$cf":
                return len(self.blob(body, np.float64))
            case "$cb":
                return len(self.blob(body, np.bool_))
            case "$ct":
                return len(self.blob(body[0], np.int64))
            case "$cd":
                return len(self.blob(body[1], np.int64))
            case "$ca":
                return len(self.blob(body[4], np.int64))
            case "$cv":
                return len(self.blob(body[1], np.int64))
            case "$cr":
                return self.count(next(iter(body[1].values())))
        raise CheckpointError(f"unknown column tag {tag!r}")

    def profile(self, body: Any) -> Profile:
        slot = len(self.objects)
        self.objects.append(None)
        document = self.value(body["document"])
        try:
            profile = parse_profile(document)
        except EyrieError as exc:
            raise CheckpointError(f"profile: {exc}") from None
        self.objects[slot] = profile
        for name, state in body["plugins"].items():
            plugin = profile.plugins.get(name)
            restore = getattr(plugin, "restore_state", None)
            if restore is None:
                raise CheckpointError(f"profile {profile.name}: plugin {name} cannot restore its state")
            restore(self.value(state))
        if body["waiting"] is not None:
            profile.handle.waiting = self.value(body["waiting"])
        return profile

    def restore(self, obj: object, section: dict[str, Any]) -> None:
        for name, item in section.items():
            try:
                object.__setattr__(obj, name, self.value(item))
            except CheckpointError as exc:
                raise CheckpointError(f"{name}: {exc.reason}") from None


_FLOATS = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


class _NoCollection:
    """The cyclic garbage collector paused while a checkpoint is written or read: both make hundreds of
    thousands of objects among a shard's millions, and each generation-2 collection they would trigger
    walks all of them (it multiplied the time several times over). Nothing made here is cyclic garbage."""

    def __enter__(self) -> None:
        self.was_enabled = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self.was_enabled:
            gc.enable()


def _components(shard: Shard) -> tuple[object, ...]:
    scheduler = shard.scheduler
    snapshot = scheduler.snapshot
    return (shard, scheduler.profiles, scheduler, snapshot, snapshot._usage, shard.placer)


def encode_checkpoint(shard: Shard, offset: int) -> bytes:
    """The shard's complete state after applying every sequencer record before `offset`, as bytes. Raises
    `CheckpointError` naming the attribute if some value cannot be written."""
    with _NoCollection():
        return _encode(shard, offset)


def _encode(shard: Shard, offset: int) -> bytes:
    parts = _components(shard)
    links = {
        id(part): section.name for part, section in zip(parts, _SECTIONS, strict=True) if part is not None
    }
    links[id(shard.counters)] = "counters"
    encoder = _Encoder(links)
    state: dict[str, Any] = {}
    for part, section in zip(parts, _SECTIONS, strict=True):
        if part is None:
            state[section.name] = None
            continue
        try:
            state[section.name] = encoder.attributes(part, section.skip)
        except CheckpointError as exc:
            raise CheckpointError(f"{section.name}.{exc.reason}") from None
    header = {
        "format": FORMAT,
        "version": VERSION,
        "offset": offset,
        "models": encoder.model_table(),
        "state": state,
    }
    return write_container(header, encoder.blobs)


def _check(header: dict[str, Any]) -> int:
    if header.get("format") != FORMAT:
        raise CheckpointError("not a shard checkpoint")
    if header.get("version") != VERSION:
        raise CheckpointError(
            f"checkpoint format version {header.get('version')!r}; this worker reads version {VERSION}"
        )
    offset = header.get("offset")
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise CheckpointError(f"bad offset {offset!r}")
    return offset


def checkpoint_offset(data: bytes) -> int:
    """The sequencer offset a checkpoint was taken at (raises `CheckpointError` as `decode_checkpoint`,
    for what its header shows): reads no further than the header."""
    header, _ = read_container(data, header_only=True)
    return _check(header)


def decode_checkpoint(data: bytes) -> tuple[Shard, int]:
    """The shard a checkpoint holds, and the sequencer offset to resume at. Raises `CheckpointError` (with
    a one-line reason) for anything corrupt, of another version, or that does not restore."""
    with _NoCollection():
        return _decode(data)


def _decode(data: bytes) -> tuple[Shard, int]:
    header, blobs = read_container(data)
    offset = _check(header)
    state = header.get("state")
    if not isinstance(state, dict) or [s.name for s in _SECTIONS] != list(state):
        raise CheckpointError("the checkpoint's sections are not the ones this version writes")
    shard = Shard()
    scheduler = shard.scheduler
    snapshot = scheduler.snapshot
    usage = None
    if state["usage"] is not None:
        usage = NodeUsage(Snapshot())  # caches start empty; every stored array is replaced below
        usage.snapshot = snapshot
    parts: tuple[object, ...] = (shard, scheduler.profiles, scheduler, snapshot, usage, shard.placer)
    links = {section.name: part for part, section in zip(parts, _SECTIONS, strict=True)}
    links["counters"] = shard.counters
    decoder = _Decoder(links, blobs)
    try:
        decoder.read_models(header.get("models"))
        for part, section in zip(parts, _SECTIONS, strict=True):
            if part is not None:
                decoder.restore(part, state[section.name])
            if part is shard:
                links["counters"] = shard.counters
    except CheckpointError as exc:
        raise CheckpointError(f"cannot restore the checkpoint: {exc.reason}") from None
    except (EyrieError, ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())
        raise CheckpointError(f"cannot restore the checkpoint: {reason}") from None
    snapshot._usage = usage
    # Links the sections do not store: one counter table and one profile set for the shard and its placer.
    shard.placer.counters = shard.counters
    if not isinstance(scheduler.profiles, ProfileSet):
        raise CheckpointError("cannot restore the checkpoint: no profile set")
    return shard, offset
