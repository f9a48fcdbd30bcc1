"""A seeded corpus of hostile records, topic by topic, each carrying the fate eyrie documents for it.

``corpus(topic, count, seed=..., now=...)`` yields the same `Hostile` records for the same arguments. A
corpus starts with one record of each class, in order, so even a small one covers every class; the rest are
drawn at random by weight. A class is a sentence fragment ("a huge string in uid") that names a test case.

Fates (README, "Hostile input"):

- `Fate.DEAD_LETTER`: exactly `letters` dead letters cite the record (topic, partition, offset), each a
  one-line reason naming `names`. A metrics array gets one per bad element (at most 64).
- `Fate.REFUSED`: well-formed but cannot apply (a cordon, uncordon or delete of a node nobody announced):
  placement dead-letters it once; that letter names the node (`node`) but no offset, since placement sees the
  envelope, not the record.
- `Fate.ACCEPTED`: no dead letter; handled as `handling` says. Bindings (`result_uid`) are answered with one
  `BindingResult` each; pods (`verdict_uid`) get an unschedulable verdict (their selector matches no node).
- `Fate.NEVER_SENT`: the producer refuses it (over ``max_message_bytes``), or the broker does (no key on a
  compacted topic); nothing reaches a consumer.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from copy import deepcopy
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = [
    "DEEP",
    "HUGE",
    "LIMIT",
    "SELECTOR",
    "T1970",
    "T2100",
    "TAINT",
    "TOPICS",
    "Fate",
    "Hostile",
    "classes",
    "corpus",
]

TOPICS = ("pod-requests", "node-events", "metrics", "bindings", "config", "sequencer")
"""Short topic names; ``sequencer`` is the internal one, read by placement."""

HUGE = 100 * 1024
"""Characters of a huge string: 400 times the longest name eyrie accepts."""
DEEP = 10_000
"""Levels of a deeply nested value: orjson reads 1024, pydantic's parser fewer, Python's recursion 1000."""
T1970 = 0.0
T2100 = 4_102_444_800.0
SELECTOR = {"eyrie.io/fuzz": "nowhere"}
"""The node selector of every valid pod in the corpus: no node has that label, so none is ever placed."""
TAINT = {"key": "eyrie.io/fuzz", "value": "", "effect": "NoSchedule"}
"""The taint of every node the corpus announces, so that a real pod is never placed on one."""
LIMIT = 1_048_576
"""`Settings.max_message_bytes`' default."""


class Fate(StrEnum):
    DEAD_LETTER = "dead letter"
    REFUSED = "refused by placement"
    ACCEPTED = "accepted"
    NEVER_SENT = "never reaches the topic"


@dataclass(frozen=True, slots=True)
class Hostile:
    topic: str
    klass: str
    key: bytes | None
    value: bytes | None
    fate: Fate
    handling: str
    letters: int = 0
    names: str | None = None
    """Text every dead letter's error contains: the field it names (or "JSON" for what does not parse)."""
    node: str | None = None
    """`Fate.REFUSED`: the node placement's dead letter names."""
    result_uid: str | None = None
    """A binding the applier answers (conflict: node not found)."""
    verdict_uid: str | None = None
    """A pod placement holds and declares unschedulable."""


# ------------------------------------------------------------------------------------------- rendering


class Raw(str):
    """A JSON token written as is (NaN, 1e400, huge integers): `render` puts it in unquoted."""

    __slots__ = ()


def render(value: Any) -> bytes:
    """JSON of `value`, with `Raw` tokens unquoted; big integers and NaN stay as written (stdlib json)."""
    markers: dict[str, str] = {}

    def swap(item: Any) -> Any:
        if isinstance(item, Raw):
            marker = f"\x00raw{len(markers)}\x00"
            markers[json.dumps(marker)] = str(item)
            return marker
        if isinstance(item, dict):
            return {key: swap(inner) for key, inner in item.items()}
        if isinstance(item, list):
            return [swap(inner) for inner in item]
        return item

    text = json.dumps(swap(value), separators=(",", ":"), ensure_ascii=False)
    for marker, token in markers.items():
        text = text.replace(marker, token)
    return text.encode()


def put(document: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of `document` with `value` at the dotted `path` (digits index lists)."""
    copy = deepcopy(document)
    *parents, last = path.split(".")
    here: Any = copy
    for part in parents:
        here = here[int(part)] if isinstance(here, list) else here[part]
    if isinstance(here, list):
        here[int(last)] = value
    else:
        here[last] = value
    return copy


def nested(levels: int, leaf: Any = 1) -> Any:
    """`levels` objects inside one another, built without recursion."""
    value = leaf
    for _ in range(levels):
        value = {"a": value}
    return value


def deep_bytes(levels: int = DEEP) -> bytes:
    return b'{"a":' * levels + b"1" + b"}" * levels


# -------------------------------------------------------------------------------------------- the maker

Maker = Callable[["_Gen"], Hostile]
Weighted = list[tuple[Maker, float]]


class _Gen:
    """One topic's generator state: what the corpus announced, placed and deleted so far."""

    def __init__(self, topic: str, seed: int, now: float, limit: int) -> None:
        self.topic = topic
        self.rng = random.Random(f"{seed}/{topic}")
        self.now = now
        self.limit = limit
        self.index = 0
        self.pods: list[str] = []
        """Valid pods placement holds: queued and unschedulable, not deleted."""
        self.announced: set[str] = set()
        self.counter = 0

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"fz-{prefix}-{self.counter}"

    def pick(self, options: list[Any]) -> Any:
        return options[self.rng.randrange(len(options))]

    def quantity(self, resource: str) -> Any:
        """Valid quantities, the largest eyrie takes included (2^62 base units: millicores for cpu)."""
        largest = f"{2**62}m" if resource == "cpu" else 2**62
        return self.pick(["0", "100m", "1", "2Gi", 0, 3, "1.5", "64Gi", "500m", largest])

    def ts(self) -> float:
        return self.now + self.rng.uniform(-5.0, 1.0)

    def record(
        self, klass: str, key: bytes | None, value: bytes | None, fate: Fate, handling: str, **extra: Any
    ) -> Hostile:
        return Hostile(self.topic, klass, key, value, fate, handling, **extra)

    def letter(
        self, klass: str, key: bytes | None, value: bytes | None, names: str | None, letters: int = 1
    ) -> Hostile:
        return self.record(klass, key, value, Fate.DEAD_LETTER, "a dead letter", letters=letters, names=names)


# ------------------------------------------------------------------------------------------ valid bodies


def pod_body(g: _Gen, uid: str, **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "uid": uid,
        "containers": [
            {"name": "main", "requests": {"cpu": g.quantity("cpu"), "memory": g.quantity("memory")}}
        ],
        "labels": {"app": g.pick(["web", "db", "fz"])},
        "node_selector": dict(SELECTOR),
    }
    return {**body, **fields}


def node_body(g: _Gen, name: str, kind: str = "upsert", **fields: Any) -> dict[str, Any]:
    allocatable = {"cpu": g.quantity("cpu"), "memory": g.quantity("memory"), "pods": 110}
    spec = {"name": name, "allocatable": allocatable, "labels": {"zone": "fz"}, "taints": [dict(TAINT)]}
    return {"type": kind, "node": spec, **fields}


def sample_body(g: _Gen, node: str, **fields: Any) -> dict[str, Any]:
    values = {"cpu": g.pick([0.0, 0.5, 3.0, 1e-300]), "memory": g.pick([0.0, 2.0**30, 1e18])}
    return {"ts": g.ts(), "node": node, "values": values, **fields}


def binding_body(g: _Gen, uid: str, **fields: Any) -> dict[str, Any]:
    node = f"fz-ghost-node-{g.rng.randrange(8)}"  # never announced: the applier answers "node not found"
    requests = {"cpu": g.quantity("cpu"), "memory": g.quantity("memory")}
    return {"uid": uid, "node": node, "requests": requests, "attempt": g.rng.randrange(3), **fields}


def profile_body(g: _Gen, name: str) -> dict[str, Any]:
    weight = g.rng.randrange(1, 5)
    return {
        "schedulerName": name,
        "plugins": {"score": {"enabled": [{"name": "NodeResourcesFit", "weight": weight}]}},
    }


def envelope_body(g: _Gen) -> dict[str, Any]:
    value = pod_body(g, g.fresh("seq-pod"))
    return {"k": "pod", "ts": g.ts(), "seq": None, "src": "pod-requests/0", "v": value}


def valid_body(g: _Gen) -> tuple[dict[str, Any], bytes]:
    """A valid value of `g.topic` and the key it must carry."""
    topic = g.topic
    if topic == "pod-requests":
        uid = g.fresh("pod")
        return pod_body(g, uid), uid.encode()
    if topic == "node-events":
        name = g.fresh("node")
        return node_body(g, name), name.encode()
    if topic == "metrics":
        node = f"fz-ghost-metrics-{g.rng.randrange(32)}"
        return sample_body(g, node), node.encode()
    if topic == "bindings":
        uid = g.fresh("bind")
        return binding_body(g, uid), uid.encode()
    if topic == "config":
        name = f"fz-profile-{g.rng.randrange(8)}"
        return profile_body(g, name), name.encode()
    return envelope_body(g), b"shard-0"


# ------------------------------------------------------------------------------- classes on every topic

WRONG_TYPES: dict[str, list[tuple[str, list[Any], str]]] = {
    "pod-requests": [
        ("uid", [5, [], {}], "uid"),
        ("priority", ["high", [], {}], "priority"),
        ("labels", [[], "x", 5], "labels"),
        ("labels.app", [5, [], {}], "labels.app"),
        ("containers", ["x", 5, {}], "containers"),
        ("containers.0.requests", ["x", [], 5], "containers.0.requests"),
        ("containers.0.requests.cpu", [[], {}, True], "containers.0.requests.cpu"),
        ("replicas", ["many", [], {}], "replicas"),
        ("created_at", ["yesterday", [], {}], "created_at"),
        ("scheduler_name", [5, [], {}], "scheduler_name"),
        ("tolerations", ["x", 5, {}], "tolerations"),
        ("host_ports", ["80", {}], "host_ports"),
        ("node_selector", [[], "x", 5], "node_selector"),
        ("pod_group", ["x", 5, []], "pod_group"),
    ],
    "node-events": [
        ("type", [5, "explode", []], "type"),
        ("node", ["x", 5, []], "node"),
        ("node.name", [5, [], {}], "node.name"),
        ("node.labels", [[], "x"], "node.labels"),
        ("node.labels.zone", [5, {}], "node.labels.zone"),
        ("node.taints", [{}, "x"], "node.taints"),
        ("node.taints.0.effect", ["Sometimes", 5], "node.taints.0.effect"),
        ("node.allocatable", ["x", []], "node.allocatable"),
        ("node.allocatable.cpu", [[], {}, True], "node.allocatable.cpu"),
        ("node.oversell_rate", ["high", [], 0, -1, 1000], "node.oversell_rate"),
        ("node.unschedulable", ["maybe", [], {}], "node.unschedulable"),
        ("ts", ["now", [], {}, -1], "ts"),
    ],
    "metrics": [
        ("ts", ["now", [], {}, -1], "ts"),
        ("node", [5, [], {}], "node"),
        ("pod", [5, [], {}], "pod"),
        ("workload", [5, []], "workload"),
        ("values", [[], "x", 5, {}], "values"),
        ("values.cpu", [{}, [], "lots"], "values.cpu"),
    ],
    "bindings": [
        ("uid", [5, [], {}], "uid"),
        ("node", [5, []], "node"),
        ("cluster", [5, []], "cluster"),
        ("score", ["high", []], "score"),
        ("plugin_scores", [[], "x"], "plugin_scores"),
        ("requests", ["x", []], "requests"),
        ("requests.cpu", [[], {}, True], "requests.cpu"),
        ("node_version", ["x", -1, 2**70], "node_version"),
        ("attempt", ["x", -1, 2**64, 2**70], "attempt"),
        ("decided_at", ["x", -1], "decided_at"),
        ("batch_id", [5, []], "batch_id"),
    ],
    "config": [
        ("schedulerName", [5, []], "schedulerName"),
        ("plugins", ["x", 5], "plugins"),
        # The profile loader trips on this shape before it can name it: the letter says "malformed".
        ("plugins.score", ["x", 5], "malformed"),
        ("plugins.score.enabled", ["x", 5], "enabled"),
        ("plugins.score.enabled.0.weight", ["heavy", -1, []], "weight"),
        ("pluginConfig", [{}, "x"], "pluginConfig"),
    ],
    "sequencer": [
        ("k", [5, "explode", []], "k:"),
        ("ts", ["x", [], None], "ts:"),
        ("seq", ["x", []], "seq:"),
        ("src", [5, []], "src:"),
        ("v", ["x", 5], "value"),
        ("v.uid", [5, []], "value.uid"),
        ("v.containers.0.requests.cpu", ["NaNm", "-1", []], "value.containers.0.requests.cpu"),
    ],
}

HUGE_STRINGS: dict[str, list[str]] = {
    "pod-requests": [
        "uid",
        "name",
        "namespace",
        "workload",
        "scheduler_name",
        "labels.app",
        "containers.0.name",
    ],
    "node-events": ["node.name", "node.cluster", "node.labels.zone", "node.taints.0.key"],
    "metrics": ["node", "pod", "workload"],
    "bindings": ["uid", "node", "cluster", "profile", "batch_id"],
    "config": ["schedulerName"],
    "sequencer": ["v.uid", "v.name"],
}

BAD_QUANTITIES = [
    Raw("NaN"),
    Raw("Infinity"),
    Raw("-Infinity"),
    Raw("1e400"),
    -1,
    "NaN",
    "NaNm",
    "-1",
    "1e999",
    "Infinity",
    "12Q",
    "1Ei",
    "9" * 70,
    True,
]
"""Quantities eyrie refuses (1Ei of cpu is 2^60 cores: over 2^62 millicores)."""

QUANTITY_PATHS = {
    "pod-requests": "containers.0.requests.cpu",
    "node-events": "node.allocatable.cpu",
    "bindings": "requests.cpu",
    "sequencer": "v.containers.0.requests.cpu",
}

WHERE = {"sequencer": "value."}
"""What precedes a field's name in placement's dead letters (the envelope's value)."""


def truncated(g: _Gen) -> Hostile:
    body, key = valid_body(g)
    raw = render(body)
    return g.letter("truncated JSON", key, raw[: g.rng.randrange(1, len(raw) - 1)], "JSON")


def wrong_type(g: _Gen) -> Hostile:
    path, values, names = g.pick(WRONG_TYPES[g.topic])
    body, key = valid_body(g)
    value = g.pick(values)
    return g.letter(f"a wrong type in {path}", key, render(put(body, path, value)), names)


def huge_string(g: _Gen) -> Hostile:
    path = g.pick(HUGE_STRINGS[g.topic])
    body, key = valid_body(g)
    char = g.pick(["x", "é", "\u0001"])  # one byte, two bytes (UTF-8), six (a JSON escape)
    body = put(body, path, char * (HUGE // len(json.dumps(char)[1:-1].encode())))
    names = path.replace("v.", WHERE.get(g.topic, "")) if g.topic != "config" else None
    if path in ("uid", "node") and g.topic in ("pod-requests", "metrics", "bindings"):
        key = body[path].encode()  # keyed by the huge name itself, so the field is what fails
    return g.letter(f"a huge string in {path}", key, render(body), names)


def deeply_nested(g: _Gen) -> Hostile:
    _, key = valid_body(g)
    return g.letter(f"{DEEP:,} levels of nesting", key, deep_bytes(), "JSON")


def not_an_object(g: _Gen) -> Hostile:
    _, key = valid_body(g)
    return g.letter(
        "JSON that is not an object", key, g.pick([b"1", b'"pod"', b"null", b"true", b"3.5e2"]), None
    )


def garbage(g: _Gen) -> Hostile:
    _, key = valid_body(g)
    noise = b"\xff" + g.rng.randbytes(g.rng.randrange(8, 512))
    return g.letter("arbitrary bytes", key, noise, None)


def tombstone(g: _Gen) -> Hostile:
    _, key = valid_body(g)
    if g.topic == "config":
        return g.record(
            "a tombstone", key, None, Fate.ACCEPTED, "ignored: a profile is never removed at run time"
        )
    return g.letter("a tombstone (no value)", key, None, None)


def just_under_the_limit(g: _Gen) -> Hostile:
    body, key = valid_body(g)
    size = g.limit - 2048
    if g.topic == "metrics":  # one record of tiny elements: far over the elements a record may carry
        count = (size - 2) // 2
        return g.letter(
            "an array just under max_message_bytes", key, b"[" + b",".join([b"0"] * count) + b"]", "elements"
        )
    pad = "p" * (size - len(render(body)) - 32)
    path = {
        "pod-requests": "labels.app",
        "node-events": "node.labels.zone",
        "bindings": "batch_id",
        "sequencer": "v.labels.app",
    }.get(g.topic, "padding")  # config: an unknown field
    value = render(put(body, path, pad))
    assert len(value) <= size, len(value)
    names = path.replace("v.", WHERE.get(g.topic, ""))
    return g.letter("a record just under max_message_bytes", key, value, names)


def over_the_limit(g: _Gen) -> Hostile:
    body, key = valid_body(g)
    value = render(put(body, "padding", "p" * (g.limit + 1024)))
    return g.record(
        "a record over max_message_bytes",
        key,
        value,
        Fate.NEVER_SENT,
        "the producer refuses it (MessageSizeTooLarge)",
    )


COMMON: Weighted = [
    (truncated, 60),
    (wrong_type, 80),
    (huge_string, 2),
    (deeply_nested, 2),
    (not_an_object, 20),
    (garbage, 30),
    (tombstone, 20),
    (just_under_the_limit, 0.15),
    (over_the_limit, 0.15),
]
"""Weights out of about 600 per topic: ~30 huge strings (100 KB) and ~3 records near 1 MB per 10,000."""

# --------------------------------------------------------------------------------------- keyed topics


def wrong_key(g: _Gen) -> Hostile:
    body, _ = valid_body(g)
    return g.letter("a valid value under another record key", b"fz-somebody-else", render(body), "key")


def non_utf8_key(g: _Gen) -> Hostile:
    body, key = valid_body(g)
    return g.letter("a valid value under a key that is not UTF-8", b"\xff\xfe" + key, render(body), "key")


def no_key(g: _Gen) -> Hostile:
    body, _ = valid_body(g)
    if g.topic in ("node-events", "config"):
        return g.record(
            "a record without a key",
            None,
            render(body),
            Fate.NEVER_SENT,
            "the broker refuses it: the topic is compacted",
        )
    return g.letter("a valid value without a record key", None, render(body), "key")


KEYED: Weighted = [(wrong_key, 15), (non_utf8_key, 10), (no_key, 10)]

# ------------------------------------------------------------------------------------------ pod-requests


QUEUED = 150
"""About how many valid pods the corpus keeps queued: deletions take them back as fast as they come beyond
that. Each is state placement rightly keeps until the pod is deleted, so they must not pile up for the
worker's memory to stay flat."""


def valid_pod(g: _Gen) -> Hostile:
    body, key = valid_body(g)
    when = g.pick([None, g.ts(), T1970, T2100])
    if when is not None:
        body["created_at"] = when
    g.pods.append(body["uid"])
    handling = {
        None: "queued at the forwarder's clock, then unschedulable",
        T1970: "queued: a 1970 event time is kept (placement's clock never moves back), then unschedulable",
        T2100: "queued: a 2100 event time is clamped to the forwarder's clock, then unschedulable",
    }.get(when, "queued at its own event time, then unschedulable")
    klass = {T1970: "a pod created in 1970", T2100: "a pod created in 2100"}.get(when, "a valid pod")
    return g.record(klass, key, render(body), Fate.ACCEPTED, handling, verdict_uid=body["uid"])


def duplicate_pod(g: _Gen) -> Hostile:
    if not g.pods:
        return valid_pod(g)
    uid = g.pick(g.pods)
    body = pod_body(g, uid)
    handling = "ignored: placement already holds that uid (counted as duplicate_pod)"
    return g.record(
        "a second request with a uid placement holds", uid.encode(), render(body), Fate.ACCEPTED, handling
    )


def deletion(g: _Gen) -> Hostile:
    when = g.pick([g.ts(), T1970, T2100])
    if g.pods and g.rng.random() < min(1.0, len(g.pods) / QUEUED):
        uid = g.pods.pop(g.rng.randrange(len(g.pods)))
        klass, handling = "a deletion of a queued pod", "the pod leaves placement's queue"
    else:
        uid = g.fresh("ghost-pod")
        klass, handling = "a deletion of a pod nobody requested", "nothing to release"
    if when in (T1970, T2100):
        klass += f" dated {'1970' if when == T1970 else '2100'}"
    body = {"kind": "PodDeleted", "uid": uid, "ts": when}
    return g.record(klass, uid.encode(), render(body), Fate.ACCEPTED, handling)


def bad_quantity(g: _Gen) -> Hostile:
    body, key = valid_body(g)
    path = QUANTITY_PATHS[g.topic]
    names = path.replace("v.", WHERE.get(g.topic, ""))
    value = g.pick(BAD_QUANTITIES)
    if isinstance(value, Raw) and g.topic == "sequencer":
        names = "JSON"  # placement reads envelopes with orjson, which refuses NaN and infinities outright
    return g.letter(f"a quantity of {value!s:.12}", key, render(put(body, path, value)), names)


def nested_labels(g: _Gen) -> Hostile:
    body, key = valid_body(g)
    # pydantic's JSON parser stops at 255 levels, under orjson's 1024.
    return g.letter("labels nested 300 levels deep", key, render(put(body, "labels", nested(300))), "JSON")


def unknown_field(g: _Gen) -> Hostile:
    body, key = valid_body(g)
    return g.letter("a misspelt field", key, render({**body, "reqeusts": {"cpu": "1"}}), "reqeusts")


POD_REQUESTS: Weighted = [
    (valid_pod, 120),
    (duplicate_pod, 40),
    (deletion, 110),
    (bad_quantity, 60),
    (nested_labels, 5),
    (unknown_field, 15),
]

# ------------------------------------------------------------------------------------------- node-events

POOL = [f"fz-node-{k}" for k in range(16)]
"""Nodes the corpus announces (tainted), so that repeated upserts replace rather than pile up."""


def node_upsert(g: _Gen) -> Hostile:
    name = g.pick(POOL)
    when = g.pick([None, g.ts(), T1970, T2100])
    body = node_body(g, name)
    if when is not None:
        body["ts"] = when
    g.announced.add(name)
    klass = {T1970: "a node announced in 1970", T2100: "a node announced in 2100"}.get(when, "a valid node")
    return g.record(
        klass, name.encode(), render(body), Fate.ACCEPTED, "announced (tainted: nothing lands there)"
    )


def node_change(g: _Gen) -> Hostile:
    kind = g.pick(["cordon", "uncordon", "delete"])
    known = sorted(g.announced)
    if known and g.rng.random() < 0.5:
        name = g.pick(known)
        if kind == "delete":
            g.announced.discard(name)
        body = {"type": kind, "node": {"name": name}}
        return g.record(
            f"a {kind} of an announced node", name.encode(), render(body), Fate.ACCEPTED, "applied"
        )
    name = g.fresh("ghost")
    body = {"type": kind, "node": {"name": name}}
    return g.record(
        f"a {kind} of a node nobody announced",
        name.encode(),
        render(body),
        Fate.REFUSED,
        "placement refuses it: one dead letter naming the node",
        node=name,
    )


def over_capacity(g: _Gen) -> Hostile:
    name = g.fresh("node")
    body = {"type": "upsert", "node": {"name": name, "capacity": {"cpu": "1"}, "allocatable": {"cpu": "2"}}}
    return g.letter("allocatable over capacity", name.encode(), render(body), "node: allocatable.cpu exceeds")


NODE_EVENTS: Weighted = [
    (node_upsert, 100),
    (node_change, 80),
    (bad_quantity, 50),
    (over_capacity, 15),
]

# ------------------------------------------------------------------------------------------------ metrics


def valid_sample(g: _Gen) -> Hostile:
    body, key = valid_body(g)
    when = g.pick([None, None, T1970])
    if g.rng.random() < 0.3:
        body["pod"] = g.fresh("metrics-pod")
        body["workload"] = f"fz-workload-{g.rng.randrange(16)}"
    if when == T1970:
        body["ts"] = T1970
        return g.record(
            "a sample from 1970",
            key,
            render(body),
            Fate.ACCEPTED,
            "kept: too old for the window (counted), it feeds the portrait's hour 0",
        )
    handling = "kept in the metrics worker; placement ignores a node's summaries until the node is announced"
    return g.record("a sample of a node nobody announced", key, render(body), Fate.ACCEPTED, handling)


def sample_from_2100(g: _Gen) -> Hostile:
    body, key = valid_body(g)
    return g.letter("a sample from 2100", key, render({**body, "ts": T2100}), "ts: 4102444800")


def bad_metric_value(g: _Gen) -> Hostile:
    body, key = valid_body(g)
    value = g.pick([Raw("NaN"), Raw("Infinity"), Raw("1e400"), -1, 1e300, -0.5])
    return g.letter(
        f"a metric value of {value!s:.10}", key, render(put(body, "values.cpu", value)), "values.cpu"
    )


def mixed_array(g: _Gen) -> Hostile:
    node = f"fz-ghost-metrics-{g.rng.randrange(32)}"
    items: list[bytes] = []
    bad = 0
    for _ in range(g.rng.randrange(2, 12)):
        if g.rng.random() < 0.4:
            items.append(render(put(sample_body(g, node), "values.cpu", -1)))
            bad += 1
        else:
            items.append(render(sample_body(g, node)))
    value = b"[" + b",".join(items) + b"]"
    if bad == 0:
        return g.record(
            "an array of good samples", node.encode(), value, Fate.ACCEPTED, "every sample counts"
        )
    return g.letter("an array of good and bad samples", node.encode(), value, "].values.cpu", letters=bad)


def many_bad_elements(g: _Gen) -> Hostile:
    node = f"fz-ghost-metrics-{g.rng.randrange(32)}"
    value = b"[" + b",".join([b"{}"] * 100) + b"]"
    return g.letter("an array of 100 bad elements", node.encode(), value, "].ts", letters=64)


def too_many_elements(g: _Gen) -> Hostile:
    node = f"fz-ghost-metrics-{g.rng.randrange(32)}"
    value = b"[" + b",".join([b"0"] * 10_001) + b"]"
    return g.letter("an array of 10,001 samples", node.encode(), value, "elements")


def empty_array(g: _Gen) -> Hostile:
    _, key = valid_body(g)
    return g.letter("an empty array", key, g.pick([b"[]", b" [ ] "]), "empty array")


def deep_element(g: _Gen) -> Hostile:
    _, key = valid_body(g)
    value = b"[" + render(nested(300)) + b"]"
    return g.letter("an array element nested 300 levels deep", key, value, "[0]")


METRICS: Weighted = [
    (valid_sample, 120),
    (sample_from_2100, 20),
    (bad_metric_value, 60),
    (mixed_array, 40),
    (many_bad_elements, 2),
    (too_many_elements, 0.5),
    (empty_array, 5),
    (deep_element, 5),
]

# ----------------------------------------------------------------------------------------------- bindings


def ghost_binding(g: _Gen) -> Hostile:
    body, key = valid_body(g)
    when = g.pick([None, T1970, T2100])
    if when is not None:
        body["decided_at"] = when
    klass = {None: "a binding to a node nobody announced"}.get(
        when, f"a binding decided in {1970 if when == 0 else 2100}"
    )
    handling = "the applier answers conflict (node not found); placement ignores a pod it does not hold"
    return g.record(klass, key, render(body), Fate.ACCEPTED, handling, result_uid=body["uid"])


def duplicate_binding(g: _Gen) -> Hostile:
    uid = f"fz-bind-twice-{g.rng.randrange(64)}"
    body = binding_body(g, uid)
    handling = "answered again: conflict (node not found), nothing booked"
    return g.record(
        "a binding for a uid bound before",
        uid.encode(),
        render(body),
        Fate.ACCEPTED,
        handling,
        result_uid=uid,
    )


def release(g: _Gen) -> Hostile:
    uid = g.fresh("released")
    body = {"kind": "PodDeleted", "uid": uid, "ts": g.pick([g.ts(), T1970, T2100])}
    handling = "the ledger remembers the uid as deleted (a later binding for it is rejected)"
    return g.record("a release of a pod nobody bound", uid.encode(), render(body), Fate.ACCEPTED, handling)


BINDINGS: Weighted = [
    (ghost_binding, 120),
    (duplicate_binding, 40),
    (release, 40),
    (bad_quantity, 50),
]

# ------------------------------------------------------------------------------------------------- config


def valid_profile(g: _Gen) -> Hostile:
    body, key = valid_body(g)
    return g.record(
        "a valid profile", key, render(body), Fate.ACCEPTED, "replaces that profile for later pods"
    )


def misnamed_profile(g: _Gen) -> Hostile:
    body, _ = valid_body(g)
    return g.letter("a profile under another name's key", b"fz-other", render(body), "key")


def unknown_plugin(g: _Gen) -> Hostile:
    body, key = valid_body(g)
    body = put(body, "plugins.score.enabled.0.name", "NoSuchPlugin")
    return g.letter("a profile naming an unknown plugin", key, render(body), "NoSuchPlugin")


def nested_plugin_entry(g: _Gen) -> Hostile:
    body, key = valid_body(g)
    body = put(
        body, "plugins.score.enabled.0", {"name": "NodeResourcesFit", "weight": 1, "junk": nested(300)}
    )
    return g.letter(
        "a profile with 300 levels of nesting in a plugin entry", key, render(body), "cannot be passed on"
    )


CONFIG: Weighted = [
    (valid_profile, 60),
    (misnamed_profile, 30),
    (unknown_plugin, 30),
    (nested_plugin_entry, 5),
]

# ---------------------------------------------------------------------------------------------- sequencer


def bad_envelopes(g: _Gen) -> Hostile:
    """An array of envelopes, all bad: placement dead-letters each element on its own."""
    count = g.rng.randrange(1, 6)
    items = [render(put(envelope_body(g), "k", g.pick(["explode", 5]))) for _ in range(count)]
    return g.letter(
        "an array of bad envelopes", b"shard-0", b"[" + b",".join(items) + b"]", "k:", letters=count
    )


def nan_ts(g: _Gen) -> Hostile:
    body = envelope_body(g)
    return g.letter("an envelope dated NaN", b"shard-0", render(put(body, "ts", Raw("NaN"))), "JSON")


def empty_sequencer_array(g: _Gen) -> Hostile:
    return g.record("an empty array of envelopes", b"shard-0", b"[]", Fate.ACCEPTED, "nothing to apply")


SEQUENCER: Weighted = [
    (bad_envelopes, 60),
    (nan_ts, 20),
    (bad_quantity, 30),
    (empty_sequencer_array, 5),
]

# ----------------------------------------------------------------------------------------------- corpus

_PER_TOPIC: dict[str, Weighted] = {
    "pod-requests": POD_REQUESTS + COMMON + KEYED,
    "node-events": NODE_EVENTS + COMMON + KEYED,
    "metrics": METRICS + COMMON + KEYED,
    "bindings": BINDINGS + COMMON + KEYED,
    "config": CONFIG + COMMON + KEYED,
    "sequencer": SEQUENCER + COMMON,
}


def classes(topic: str) -> list[Maker]:
    """The makers of `topic`, in the order a corpus starts with (one record of each)."""
    seen: list[Maker] = []
    for maker, _ in _PER_TOPIC[topic]:
        if maker not in seen:
            seen.append(maker)
    return seen


def corpus(topic: str, count: int, *, seed: int = 7, now: float, limit: int = LIMIT) -> Iterator[Hostile]:
    """`count` hostile records for `topic`: one of each class first, then drawn by weight."""
    g = _Gen(topic, seed, now, limit)
    makers = [maker for maker, _ in _PER_TOPIC[topic]]
    weights = [weight for _, weight in _PER_TOPIC[topic]]
    first = classes(topic)
    for index in range(count):
        g.index = index
        maker = first[index] if index < len(first) else g.rng.choices(makers, weights)[0]
        yield maker(g)
