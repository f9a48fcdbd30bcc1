"""Settings precedence: defaults < file < EYRIE_* < KAFKA_BOOTSTRAP_SERVERS < explicit flags."""

import pytest

from schemas.exceptions import ConfigError
from streams.runtime.agents.common import batch_window_s
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
        (
            "a negative batch window is refused",
            None,
            {"EYRIE_BATCH_WINDOW_MS": "-1"},
            "EYRIE_BATCH_WINDOW_MS",
        ),
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


@pytest.mark.parametrize(
    ("case", "env", "expected_s"),
    [
        ("by default agents gather a batch for at most 15 ms", {}, 0.015),
        ("EYRIE_BATCH_WINDOW_MS sets the window", {"EYRIE_BATCH_WINDOW_MS": "40"}, 0.04),
        (
            "a window of 0 hands each batch over as soon as the agent is free",
            {"EYRIE_BATCH_WINDOW_MS": "0"},
            0.0,
        ),
    ],
)
def test_the_agents_batch_window_comes_from_the_settings(case, env, expected_s):
    assert batch_window_s(load_settings(env=env)) == expected_s


def test_topic_names_carry_the_prefix():
    assert load_settings(env={"EYRIE_TOPIC_PREFIX": "prod."}).topic("metrics") == "prod.metrics"


# ------------------------------------------------------------------------------------------- security

SECRET = "hunter2-Very-Secret"


def sasl_env(**extra):
    return {
        "EYRIE_SECURITY_PROTOCOL": "SASL_SSL",
        "EYRIE_SASL_USERNAME": "alice",
        "EYRIE_SASL_PASSWORD": SECRET,
        **extra,
    }


def written(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("case", "env", "overrides", "message"),
    [
        (
            "SASL without a user names sasl_username",
            {"EYRIE_SECURITY_PROTOCOL": "SASL_SSL", "EYRIE_SASL_PASSWORD": SECRET},
            {},
            "sasl_username: required when security_protocol is SASL_SSL",
        ),
        (
            "SASL without a password names sasl_password and where to put it",
            {"EYRIE_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "EYRIE_SASL_USERNAME": "alice"},
            {},
            "sasl_password: required when security_protocol is SASL_PLAINTEXT (EYRIE_SASL_PASSWORD or",
        ),
        (
            "a password without a SASL protocol is taken for a forgotten security_protocol",
            {"EYRIE_SASL_PASSWORD": SECRET},
            {},
            "EYRIE_SASL_PASSWORD: sasl_password: set, but security_protocol PLAINTEXT does not use SASL",
        ),
        (
            "a CA file without TLS is refused",
            {
                "EYRIE_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
                "EYRIE_SASL_USERNAME": "a",
                "EYRIE_SASL_PASSWORD": "p",
            },
            {"ssl_cafile": "CA"},
            "--ssl-cafile: set, but security_protocol SASL_PLAINTEXT does not use TLS",
        ),
        (
            "a CA file that does not exist names the flag",
            {"EYRIE_SECURITY_PROTOCOL": "SSL"},
            {"ssl_cafile": "/nonexistent/ca.pem"},
            "--ssl-cafile: /nonexistent/ca.pem does not exist or is not a file",
        ),
        (
            "a CA file that does not exist names the variable",
            {"EYRIE_SECURITY_PROTOCOL": "SSL", "EYRIE_SSL_CAFILE": "/nonexistent/ca.pem"},
            {},
            "EYRIE_SSL_CAFILE: ssl_cafile: /nonexistent/ca.pem does not exist",
        ),
        (
            "a key without its certificate names ssl_keyfile",
            {"EYRIE_SECURITY_PROTOCOL": "SSL"},
            {"ssl_keyfile": "CA"},
            "--ssl-keyfile: needs ssl_certfile",
        ),
        (
            "an unknown protocol lists the known ones",
            {"EYRIE_SECURITY_PROTOCOL": "TLS"},
            {},
            "EYRIE_SECURITY_PROTOCOL: security_protocol: Input should be 'PLAINTEXT', 'SSL'",
        ),
        (
            "an unknown mechanism lists the known ones",
            sasl_env(EYRIE_SASL_MECHANISM="GSSAPI"),
            {},
            "EYRIE_SASL_MECHANISM: sasl_mechanism: Input should be 'PLAIN', 'SCRAM-SHA-256' or",
        ),
        (
            "a password file that does not exist names the flag and the file",
            sasl_env(),
            {"sasl_password_file": "/nonexistent/password"},
            "--sasl-password-file: cannot read /nonexistent/password: No such file or directory",
        ),
        ("an empty password file is refused", sasl_env(), {"sasl_password_file": "EMPTY"}, "empty is empty"),
        (
            "a password file named in the environment names the variable",
            sasl_env(EYRIE_SASL_PASSWORD_FILE="/nonexistent/password"),
            {},
            "EYRIE_SASL_PASSWORD_FILE: sasl_password_file: cannot read /nonexistent/password",
        ),
    ],
)
def test_bad_security_settings_fail_with_one_line_naming_the_field(tmp_path, case, env, overrides, message):
    files = {"CA": written(tmp_path, "ca.pem", "x"), "EMPTY": written(tmp_path, "empty", "\n")}
    overrides = {name: files.get(value, value) for name, value in overrides.items()}
    with pytest.raises(ConfigError) as error:
        load_settings(env=env, **overrides)
    assert message in str(error.value)
    assert "\n" not in str(error.value)
    assert SECRET not in str(error.value)


SASL_USER = {"EYRIE_SECURITY_PROTOCOL": "SASL_SSL", "EYRIE_SASL_USERNAME": "alice"}


@pytest.mark.parametrize(
    ("case", "file", "env", "overrides", "expected"),
    [
        ("the password comes from EYRIE_SASL_PASSWORD", None, sasl_env(), {}, SECRET),
        (
            "a password file flag beats EYRIE_SASL_PASSWORD",
            None,
            sasl_env(),
            {"sasl_password_file": "{password_file}"},
            "from-file",
        ),
        (
            "EYRIE_SASL_PASSWORD beats a password file named in the settings file",
            "sasl_password_file: {password_file}\n",
            sasl_env(),
            {},
            SECRET,
        ),
        (
            "EYRIE_SASL_PASSWORD_FILE beats a password in the settings file",
            f"sasl_password: {SECRET}\n",
            {**SASL_USER, "EYRIE_SASL_PASSWORD_FILE": "{password_file}"},
            {},
            "from-file",
        ),
    ],
)
def test_the_sasl_password_follows_the_same_precedence_as_every_setting(
    tmp_path, case, file, env, overrides, expected
):
    password_file = str(written(tmp_path, "password", "from-file\n"))  # the final newline is not part of it
    env = {name: value.format(password_file=password_file) for name, value in env.items()}
    overrides = {name: value.format(password_file=password_file) for name, value in overrides.items()}
    path = written(tmp_path, "eyrie.yaml", file.format(password_file=password_file)) if file else None
    settings = load_settings(path, env=env, **overrides)
    assert settings.sasl_password is not None
    assert settings.sasl_password.get_secret_value() == expected


def test_protocol_and_mechanism_may_be_written_in_lower_case():
    settings = load_settings(
        env=sasl_env(EYRIE_SECURITY_PROTOCOL="sasl_ssl", EYRIE_SASL_MECHANISM="scram-sha-512")
    )
    assert (settings.security_protocol, settings.sasl_mechanism) == ("SASL_SSL", "SCRAM-SHA-512")


@pytest.mark.parametrize(
    ("case", "show"),
    [
        ("repr", repr),
        ("str", str),
        ("a JSON dump", lambda s: s.model_dump_json()),
        ("a dict dump", lambda s: str(s.model_dump())),
        ("an f-string of the password field", lambda s: f"{s.sasl_password}"),
    ],
)
def test_the_sasl_password_never_shows_when_settings_are_printed(case, show):
    settings = load_settings(
        env=sasl_env(EYRIE_SSL_KEY_PASSWORD="key-" + SECRET, EYRIE_SECURITY_PROTOCOL="SASL_SSL")
    )
    text = show(settings)
    assert SECRET not in text
    assert "**********" in text


@pytest.mark.parametrize(
    ("case", "file"),
    [
        ("a YAML syntax error on the password's line", f'sasl_password: "{SECRET}\nsasl_username: [x\n'),
        ("a password that is not a string", "sasl_password: [hunter2-Very-Secret]\n"),
        ("a setting that is not known next to the password", f"sasl_password: {SECRET}\nsasl_pasword: x\n"),
    ],
)
def test_errors_about_a_settings_file_never_quote_the_password(tmp_path, case, file):
    with pytest.raises(ConfigError) as error:
        load_settings(written(tmp_path, "eyrie.yaml", file), env={})
    assert SECRET not in str(error.value)
    assert "\n" not in str(error.value)
