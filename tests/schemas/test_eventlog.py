"""Recorded event logs: written and read back line by line, bad lines reported by number."""

import gzip
import tracemalloc

import orjson
import pytest

from schemas.eventlog import EventLogWriter, read_events, replacing_text
from schemas.events import MetricSample
from schemas.exceptions import EventLogError, InvalidInput
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


GOOD_LINE = b'{"ts": 0, "topic": "pod-requests", "key": "a", "value": {"uid": "a"}}\n'


def missing(tmp_path):
    return tmp_path / "nope.jsonl"


def a_directory(tmp_path):
    return tmp_path


def plain_text_named_gz(tmp_path):
    path = tmp_path / "log.jsonl.gz"
    path.write_bytes(GOOD_LINE)
    return path


def a_truncated_gz(tmp_path):
    path = tmp_path / "log.jsonl.gz"
    path.write_bytes(gzip.compress(GOOD_LINE * 2000)[:200])
    return path


def latin_1_text(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_bytes(
        GOOD_LINE + b'{"ts": 1, "topic": "pod-requests", "key": "\xe9", "value": {"uid": "a"}}\n'
    )
    return path


UNREADABLE = [
    ("a missing log says there is no such file", missing, "nope.jsonl: no such file"),
    ("a directory says it is one", a_directory, "is a directory"),
    ("plain text named .gz says it cannot be read", plain_text_named_gz, "cannot read: Not a gzipped file"),
    ("a truncated .gz says it cannot be read", a_truncated_gz, "log.jsonl.gz: cannot read"),
    ("bytes that are not UTF-8 say so", latin_1_text, "log.jsonl: not UTF-8 text"),
]


@pytest.mark.parametrize(("case", "make", "expected"), UNREADABLE, ids=[c[0] for c in UNREADABLE])
def test_a_log_that_cannot_be_read_is_invalid_input_naming_the_path_and_option(
    tmp_path, case, make, expected
):
    with pytest.raises(InvalidInput) as error:
        list(read_events(make(tmp_path), field="LOG"))
    assert error.value.field == "LOG"
    assert str(error.value).startswith("LOG: ")
    assert expected in str(error.value)


def test_a_log_written_into_a_missing_directory_names_the_directory(tmp_path):
    with pytest.raises(InvalidInput, match=r"^--out: .*x\.jsonl: no such directory: .*nope$"):
        EventLogWriter(tmp_path / "nope" / "x.jsonl", field="--out")


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


@pytest.mark.parametrize(
    ("case", "name"),
    [
        ("Plain text is written under its name once the block ends.", "out.jsonl"),
        ("A .gz name is written compressed once the block ends.", "out.jsonl.gz"),
    ],
    ids=["plain", "gzip"],
)
def test_a_replacing_output_appears_only_when_the_block_ends(tmp_path, case, name):
    path = tmp_path / name
    with replacing_text(path, field="--out") as stream:
        stream.write("first\n")
        assert not path.exists()
    opener = gzip.open if name.endswith(".gz") else open
    with opener(path, "rt") as written:
        assert written.read() == "first\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_a_failed_block_keeps_the_earlier_output_and_leaves_no_partial_file(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_text("earlier\n")
    with pytest.raises(RuntimeError), replacing_text(path) as stream:
        stream.write("half of it\n")
        raise RuntimeError("the replay failed")
    assert path.read_text() == "earlier\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]


@pytest.mark.parametrize(
    ("case", "where", "expected"),
    [
        ("A missing directory is named.", "nope/out.jsonl", "no such directory"),
        ("A directory cannot be the output.", ".", "is a directory"),
    ],
    ids=["missing directory", "directory"],
)
def test_an_unwritable_replacing_output_is_invalid_input_naming_the_path(tmp_path, case, where, expected):
    path = tmp_path / where
    with pytest.raises(InvalidInput) as raised, replacing_text(path, field="--out"):
        pass
    assert raised.value.field == "--out"
    assert str(path) in str(raised.value) and expected in str(raised.value)
    assert ".partial." not in str(raised.value)
