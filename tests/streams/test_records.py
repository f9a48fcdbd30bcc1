"""Raw records → models or dead letters (`streams.core.decoders`), batched metric records included."""

from __future__ import annotations

import orjson
import pytest

from schemas.codec import encode
from schemas.events import MetricSample
from streams.core.decoders import decode_record, decode_records, json_arrays


def sample(node: str, ts: float = 1.0, cpu: float = 0.5) -> MetricSample:
    return MetricSample(ts=ts, node=node, values={"cpu": cpu})


def array(*items: bytes) -> bytes:
    return b"[" + b",".join(items) + b"]"


def test_a_metrics_record_holding_an_array_decodes_to_each_sample_in_order() -> None:
    samples = [sample("n1", ts=1.0), sample("n1", ts=2.0), sample("n1", ts=3.0)]
    decoded = decode_records("metrics", 0, 5, b"n1", array(*(encode(s) for s in samples)))
    assert [d.value for d in decoded] == samples


def test_a_metrics_record_holding_one_sample_decodes_as_before() -> None:
    one = sample("n1")
    assert decode_records("metrics", 0, 5, b"n1", encode(one)) == [
        decode_record("metrics", 0, 5, b"n1", encode(one))
    ]


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        (b'{"ts": 1, "node": "n1", "values": {}}', "[1].values"),
        (b'{"ts": -1, "node": "n1", "values": {"cpu": 1}}', "[1].ts"),
        (encode(sample("n2")), "[1].key"),
        (b'"a string"', "[1]"),
    ],
    ids=[
        "a sample without values",
        "a sample from before 1970",
        "a sample of another node than the record's key",
        "an element that is not an object",
    ],
)
def test_a_bad_element_becomes_its_own_dead_letter_and_the_others_still_count(bad: bytes, error: str) -> None:
    good = encode(sample("n1"))
    decoded = decode_records("metrics", 2, 9, b"n1", array(good, bad, good))
    assert [d.value for d in decoded if d.dead_letter is None] == [sample("n1"), sample("n1")]
    letter = decoded[1].dead_letter
    assert letter is not None and error in letter.error
    assert (letter.partition, letter.offset, letter.key) == (2, 9, "n1")
    assert orjson.loads(letter.raw) == orjson.loads(bad)


def test_a_truncated_array_is_one_dead_letter() -> None:
    (decoded,) = decode_records("metrics", 0, 1, b"n1", b'[{"ts": 1, "node": "n1"')
    assert decoded.dead_letter is not None and "not JSON" in decoded.dead_letter.error


def test_an_array_on_a_topic_that_carries_one_event_per_record_is_refused() -> None:
    (decoded,) = decode_records("pod-requests", 0, 1, b"a", b'[{"uid": "a"}]')
    assert decoded.dead_letter is not None


@pytest.mark.parametrize(
    ("case", "parts", "limit", "most", "expected"),
    [
        ("parts that fit together make one array", [b"1", b"22", b"333"], 100, None, [b"[1,22,333]"]),
        (
            "an array is cut before it would pass the byte limit",
            [b"1", b"22", b"333"],
            7,
            None,
            [b"[1,22]", b"[333]"],
        ),
        ("an array is cut at the element limit", [b"1", b"2", b"3"], 100, 2, [b"[1,2]", b"[3]"]),
        (
            "a part over the limit alone still gets its own array",
            [b"1", b"55555", b"2"],
            6,
            None,
            [b"[1]", b"[55555]", b"[2]"],
        ),
        ("nothing makes no array", [], 100, None, []),
    ],
)
def test_json_arrays_pack_parts_in_order_into_as_few_arrays_as_the_limits_allow(
    case: str, parts: list[bytes], limit: int, most: int | None, expected: list[bytes]
) -> None:
    arrays = json_arrays(parts, limit, most)
    assert arrays == expected
    assert [element for array in arrays for element in orjson.loads(array)] == [
        orjson.loads(p) for p in parts
    ]
