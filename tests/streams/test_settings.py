"""Settings precedence: defaults < file < EYRIE_* < KAFKA_BOOTSTRAP_SERVERS < explicit flags."""

import pytest

from schemas.exceptions import ConfigError
from streams.settings import DEFAULT_BOOTSTRAP, load_settings


@pytest.mark.parametrize(
    ("case", "file", "env", "overrides", "expected"),
    [
        ("with nothing set the local broker is used", None, {}, {}, DEFAULT_BOOTSTRAP),
        ("a settings file sets the broker", "bootstrap_servers: f:1\n", {}, {}, "f:1"),
        (
            "EYRIE_BOOTSTRAP_SERVERS beats the file",
            "bootstrap_servers: f:1\n",
            {"EYRIE_BOOTSTRAP_SERVERS": "e:1"},
            {},
            "e:1",
        ),
        (
            "KAFKA_BOOTSTRAP_SERVERS beats every EYRIE_ setting",
            None,
            {"EYRIE_BOOTSTRAP_SERVERS": "e:1", "KAFKA_BOOTSTRAP_SERVERS": "k:1"},
            {},
            "k:1",
        ),
        (
            "an explicit flag beats the environment",
            None,
            {"KAFKA_BOOTSTRAP_SERVERS": "k:1"},
            {"bootstrap_servers": "x:1"},
            "x:1",
        ),
    ],
)
def test_the_broker_address_follows_the_documented_precedence(tmp_path, case, file, env, overrides, expected):
    path = None
    if file:
        path = tmp_path / "eyrie.yaml"
        path.write_text(file)
    assert load_settings(path, env=env, **overrides).bootstrap_servers == expected


@pytest.mark.parametrize(
    ("case", "file", "env", "message"),
    [
        (
            "a non-integer partition count names the variable",
            None,
            {"EYRIE_PARTITIONS": "x"},
            "EYRIE_PARTITIONS",
        ),
        ("an unknown setting in a file names the file and the field", "partitionz: 3\n", {}, "partitionz"),
        ("a file that is not a mapping is refused", "- a\n- b\n", {}, "expected a mapping"),
        ("a topic prefix with spaces is refused", None, {"EYRIE_TOPIC_PREFIX": "a b"}, "topic_prefix"),
    ],
)
def test_bad_settings_fail_with_one_line_naming_the_source(tmp_path, case, file, env, message):
    path = None
    if file:
        path = tmp_path / "eyrie.yaml"
        path.write_text(file)
    with pytest.raises(ConfigError) as error:
        load_settings(path, env=env)
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_topic_names_carry_the_prefix():
    assert load_settings(env={"EYRIE_TOPIC_PREFIX": "prod."}).topic("metrics") == "prod.metrics"
