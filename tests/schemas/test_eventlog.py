"""Recorded event logs: written and read back line by line, bad lines reported by number."""

import tracemalloc

import orjson
import pytest

from schemas.eventlog import EventLogWriter, read_events
from schemas.events import MetricSample
from schemas.exceptions import EventLogError
from schemas.pod import PodDeleted, PodRequest


def write_lines(path, lines):
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_written_log_reads_back_as_the_same_events(tmp_path):
    events = [
        (0.0, "pod-requests", "a", PodRequest(uid="a", containers=[{"requests": {"cpu": "1"}}])),
        (1.5, "metrics", "n1", MetricSample(ts=1.5, node="n1", values={"cpu": 2.0})),
        (2.0, "pod-requests", "a", PodDeleted(uid="a", ts=2.0)),
    ]
    for suffix in ("log.jsonl", "log.jsonl.gz"):
        with EventLogWriter(tmp_path / suffix) as writer:
            for event in events:
                writer.write(*event)
        read = [(e.ts, e.topic, e.key, e.value) for e in read_events(tmp_path / suffix)]
        assert read == events


BAD = [
    ("a truncated line is reported with its number", ['{"ts": 0, "topic": "metrics"'], 1, None),
    ("a missing value is named", ['{"ts": 0, "topic": "metrics", "key": "n"}'], 1, "value"),
    ("an unknown topic is named", ['{"ts": 0, "topic": "nope", "key": "n", "value": {}}'], 1, "topic"),
    ("a negative ts is named", ['{"ts": -1, "topic": "metrics", "key": "n", "value": {}}'], 1, "ts"),
    (
        "an invalid value names the field inside it",
        ['{"ts": 0, "topic": "metrics", "key": "n", "value": {"ts": 0, "node": "n", "values": {"cpu": -1}}}'],
        1,
        "value.values.cpu",
    ),
    (
        "time going backwards is reported at the line where it happens",
        [
            '{"ts": 5, "topic": "pod-requests", "key": "a", "value": {"uid": "a"}}',
            "",
            '{"ts": 4, "topic": "pod-requests", "key": "b", "value": {"uid": "b"}}',
        ],
        3,
        "ts",
    ),
]


@pytest.mark.parametrize(("case", "lines", "line", "field"), BAD, ids=[c[0] for c in BAD])
def test_a_bad_line_is_reported_with_its_number_and_field(tmp_path, case, lines, line, field):
    with pytest.raises(EventLogError) as error:
        list(read_events(write_lines(tmp_path / "bad.jsonl", lines)))
    assert error.value.line == line
    assert error.value.field == field
    assert str(error.value).startswith(f"line {line}")


def test_reading_a_large_log_runs_in_constant_memory(tmp_path):
    path = tmp_path / "big.jsonl"
    line = orjson.dumps(
        {"ts": 0, "topic": "metrics", "key": "n", "value": {"ts": 0, "node": "n", "values": {"cpu": 1.0}}}
    )
    with open(path, "wb") as stream:
        for _ in range(50_000):
            stream.write(line + b"\n")
    tracemalloc.start()
    count = 0
    for _ in read_events(path):
        count += 1
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert count == 50_000
    assert peak < 2 * 2**20, f"peak {peak} bytes while streaming 50,000 lines"
