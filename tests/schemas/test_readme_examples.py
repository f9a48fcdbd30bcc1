"""The documentation's example inputs are valid: every ```json and ```yaml block of the README and of the
pages that show inputs is checked against the JSON Schemas that `eyrie schema export` writes and against the
loader that reads such a file (`load_documents` for what `eyrie publish` sends, the profile loader, the
clusters loader, the node-state loader of `eyrie explain`, the settings loader). And the exported schemas
accept what the models accept, the ``requests`` shorthand of a pod among it."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import pytest
import yaml
from pydantic import ValidationError

from policies.clusters.documents import load_clusters
from policies.explain import load_node_states
from policies.framework.profile import load_profiles
from schemas.documents import classify, load_documents
from schemas.exceptions import InvalidInput
from schemas.manifest import is_pod_manifest
from schemas.pod import PodRequest
from streams.settings import Settings, load_settings
from tests.commands import REPO, run_module

PAGES = ("README.md", "docs/examples.md", "docs/profiles.md", "docs/configuration.md")
"""Where the examples are kept: docs/examples.md has one of every kind."""
TEXTS = {page: (REPO / page).read_text(encoding="utf-8") for page in PAGES}
BLOCKS = [
    (page, match["language"], match["body"])
    for page, text in TEXTS.items()
    for match in re.finditer(r"^```(?P<language>json|yaml)\n(?P<body>.*?)^```$", text, re.M | re.S)
]
SETTINGS = {*Settings.model_fields, "sasl_password_file"}
EVERY_KIND = {
    "PodRequest",
    "PodDeleted",
    "PodBound",
    "NodeEvent",
    "MetricSample",
    "profile",
    "clusters",
    "nodes",
    "settings",
}

# ------------------------------------------------------------------------------------------- builders


def parse(language: str, body: str) -> list[Any]:
    """The block's documents: a YAML block may hold several, a JSON block one."""
    if language == "json":
        return [json.loads(body)]
    return [document for document in yaml.safe_load_all(body) if document is not None]


def kind_of(document: Any) -> str:
    """Which loader reads this document: a clusters file, node states, a scheduler profile, a settings file,
    or what `eyrie publish` sends (a Kubernetes manifest, or a wire model, which `load_documents` tells
    apart)."""
    if (
        isinstance(document, list)
        and document
        and all(
            isinstance(item, dict) and "name" in item and ({"resourceSummary", "nodes"} & set(item))
            for item in document
        )
    ):
        return "clusters"
    if (
        isinstance(document, list)
        and document
        and all(isinstance(item, dict) and "name" in item and "capacity" in item for item in document)
    ):
        return "nodes"
    if isinstance(document, dict) and ("schedulerName" in document or "profiles" in document):
        return "profile"
    if isinstance(document, dict) and document and set(document) <= SETTINGS:
        return "settings"
    if is_pod_manifest(document) or (isinstance(document, dict) and document.get("kind") == "List"):
        return "manifest"
    return "publish"


def wire_values(document: Any) -> list[Any]:
    """The wire-model objects a document carries: each item of a list, an event-log line's value."""
    items = document if isinstance(document, list) else [document]
    return [item["value"] if {"ts", "topic", "value"} <= set(item) else item for item in items]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, jsonschema.Draft202012Validator]:
    """Model name → a validator of the schema `eyrie schema export DIR` wrote for it."""
    target = tmp_path_factory.mktemp("schemas")
    done = run_module("streams.cli", "schema", "export", target)
    assert done.returncode == 0, done.stderr
    validators = {}
    for path in sorted(target.glob("*.schema.json")):
        schema = json.loads(path.read_text(encoding="utf-8"))
        jsonschema.Draft202012Validator.check_schema(schema)
        validators[path.name.removesuffix(".schema.json")] = jsonschema.Draft202012Validator(schema)
    return validators


def schema_errors(validator: jsonschema.Draft202012Validator, value: Any) -> list[str]:
    return [
        f"{'/'.join(map(str, error.absolute_path))}: {error.message}"
        for error in validator.iter_errors(value)
    ]


def example_inputs() -> list[tuple[str, Any]]:
    """(kind, raw document) of every example: the model's name for what `eyrie publish` sends, as
    `schemas.documents.classify` tells it, else the loader's kind."""
    found = []
    for _, language, body in BLOCKS:
        for document in parse(language, body):
            kind = kind_of(document)
            if kind != "publish":
                found.append((kind, document))
                continue
            for value in wire_values(document):
                (loaded,) = classify(value, "example")
                found.append((type(loaded.value).__name__, value))
    return found


# ---------------------------------------------------------------------------------------------- cases


def test_the_docs_show_an_example_of_every_kind_of_input():
    inputs = example_inputs()
    kinds = {kind for kind, _ in inputs}
    assert kinds >= EVERY_KIND, f"no example of {sorted(EVERY_KIND - kinds)}"
    # A pod example uses the requests shorthand, which the exported schema must accept too.
    assert any(kind == "PodRequest" and "requests" in raw for kind, raw in inputs), inputs


@pytest.mark.parametrize(
    ("page", "language", "body"),
    BLOCKS,
    ids=[
        f"{page} example {index + 1} ({language}) is valid."
        for index, (page, language, _) in enumerate(BLOCKS)
    ],
)
def test_every_example_passes_its_schema_and_its_loader(page, language, body, exported, tmp_path):
    path = tmp_path / f"example.{language}"
    path.write_text(body, encoding="utf-8")
    for document in parse(language, body):
        kind = kind_of(document)
        if kind == "clusters":
            clusters = load_clusters(path)
            assert [cluster.name for cluster in clusters] == [item["name"] for item in document]
        elif kind == "nodes":
            assert [state.name for state in load_node_states(path)] == [item["name"] for item in document]
        elif kind == "profile":
            profiles = load_profiles(path)
            assert profiles and all(profile.name for profile in profiles.values())
        elif kind == "settings":
            load_settings(path, env={})
        elif kind == "manifest":
            # A Kubernetes manifest is no wire model: `eyrie publish` converts it, so only its loader applies.
            assert list(load_documents(path))
        else:
            loaded = list(load_documents(path))
            values = wire_values(document)
            assert len(loaded) == len(values)
            for raw, loaded_document in zip(values, loaded, strict=True):
                model = type(loaded_document.value).__name__
                assert model in exported, f"no exported schema for {model}"
                assert schema_errors(exported[model], raw) == [], (model, raw)


POD_CASES = [
    (
        "The requests shorthand is one container.",
        {"uid": "a", "requests": {"cpu": "500m", "memory": "1Gi"}},
        True,
    ),
    ("The limits shorthand is one container.", {"uid": "a", "limits": {"cpu": 2}}, True),
    (
        "The shorthand with an empty container list is one container.",
        {"uid": "a", "requests": {}, "containers": []},
        True,
    ),
    (
        "The shorthand beside containers is refused.",
        {"uid": "a", "requests": {"cpu": "1"}, "containers": [{"requests": {"cpu": "1"}}]},
        False,
    ),
    ("A host port may be given as its number.", {"uid": "a", "host_ports": [8080, {"port": 9090}]}, True),
    ("A host port out of range is refused.", {"uid": "a", "host_ports": [70000]}, False),
    ("A misspelt shorthand is refused.", {"uid": "a", "reqeusts": {"cpu": "1"}}, False),
    ("A negative request is refused.", {"uid": "a", "requests": {"cpu": -1}}, False),
]


@pytest.mark.parametrize(("case", "document", "valid"), POD_CASES, ids=[case for case, _, _ in POD_CASES])
def test_the_exported_pod_request_schema_accepts_what_the_model_accepts(case, document, valid, exported):
    try:
        PodRequest.model_validate(document)
        model_accepts = True
    except (ValidationError, InvalidInput, ValueError):
        model_accepts = False
    schema_accepts = not schema_errors(exported["PodRequest"], document)
    assert (model_accepts, schema_accepts) == (valid, valid), case


@pytest.mark.parametrize("page", PAGES)
def test_the_examples_are_found_where_the_docs_keep_them(page):
    # A guard for the extraction itself: a fence it misses would leave its example unchecked.
    fences = re.findall(r"^```(json|yaml)$", TEXTS[page], re.M)
    assert len(fences) == sum(1 for where, _, _ in BLOCKS if where == page) > 0
