"""The documentation stands alone and keeps up with the code: the generated reference pages are what the
code gives now (every setting, command, option and plugin has its entry), every relative link of the
README and the pages leads to a file and heading that exist, every page is in the site's nav, and the
pages say things in the project's own words."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer
import yaml

from docs import reference
from policies.framework.profile import BUILTIN_PROFILES
from policies.framework.registry import registry
from streams.cli import app
from streams.settings import Settings
from tests.commands import REPO

DOCS = REPO / "docs"
PAGES = sorted(path for path in DOCS.rglob("*.md"))
README = REPO / "README.md"
LINK = re.compile(r"(?<!!)\[[^\]]*\]\((?P<target>[^)\s]+)\)|!\[[^\]]*\]\((?P<image>[^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


# --------------------------------------------------------------------------------------- the reference


def test_the_generated_reference_pages_are_up_to_date():
    stale = reference.stale_pages()
    assert not stale, f"stale reference pages (run `make docs`): {sorted(str(path) for path in stale)}"


def test_every_setting_has_an_entry_with_its_environment_variable():
    page = read(DOCS / "configuration.md")
    for name in [*Settings.model_fields, "sasl_password_file"]:
        assert f"### `{name}`" in page, name
        assert f"`EYRIE_{name.upper()}`" in page, name


def test_the_variables_outside_the_settings_are_documented():
    page = read(DOCS / "configuration.md")
    for variable in (
        "EYRIE_HOME",
        "EYRIE_CONFIG",
        "KAFKA_BOOTSTRAP_SERVERS",
        "KUBECONFIG",
        "EYRIE_LOG_LEVEL",
        "EYRIE_LOG_FORMAT",
        "XDG_CACHE_HOME",
        "GOMAXPROCS",
    ):
        assert f"`{variable}`" in page, variable


def test_every_command_and_option_has_an_entry():
    page = read(DOCS / "cli.md")
    for path, command in reference._commands(typer.main.get_command(app), ["eyrie"]):
        heading = f"`{' '.join(path)}`"
        assert re.search(rf"^#+ {re.escape(heading)}$", page, re.M), heading
        section = page.split(heading, 2)[-1]
        for param in command.params:
            names = param.opts if param.param_type_name == "option" else [(param.name or "").upper()]
            for name in names:
                assert f"`{name}`" in section, (heading, name)


def test_every_plugin_and_built_in_profile_has_an_entry():
    page = read(DOCS / "profiles.md")
    for name in registry():
        assert f"### `{name}`" in page, name
    for name in BUILTIN_PROFILES:
        assert f"| `{name}` |" in page, name


# ------------------------------------------------------------------------------------------------ links


def links(path: Path) -> list[str]:
    text = FENCE.sub("", read(path))
    text = re.sub(r"`[^`\n]*`", "", text)  # a link inside a code span is no link
    return [match["target"] or match["image"] for match in LINK.finditer(text)]


def anchors(path: Path) -> set[str]:
    """The ids mkdocs gives the page's headings (Python-Markdown's toc slugify)."""
    found: set[str] = set()
    for heading in re.findall(r"^#+ (.+)$", FENCE.sub("", read(path)), re.M):
        slug = re.sub(r"[^\w\s-]", "", heading.replace("`", "")).strip().lower()
        slug = re.sub(r"[-\s]+", "-", slug)
        candidate, index = slug, 0
        while candidate in found:
            index += 1
            candidate = f"{slug}_{index}"
        found.add(candidate)
    return found


@pytest.mark.parametrize("path", [README, *PAGES], ids=lambda path: str(path.relative_to(REPO)))
def test_every_relative_link_leads_to_a_file_and_heading_that_exist(path):
    for target in links(path):
        if re.match(r"[a-z]+:", target):
            assert target.startswith("https://"), (path.name, target)
            continue
        file, _, anchor = target.partition("#")
        destination = (path.parent / file).resolve() if file else path
        assert destination.exists(), f"{path.name}: {target} leads nowhere"
        assert REPO in destination.parents or destination == REPO, (
            f"{path.name}: {target} leaves the repository"
        )
        if anchor and destination.suffix == ".md":
            assert anchor in anchors(destination), f"{path.name}: no heading #{anchor} in {file or path.name}"


def test_every_page_is_in_the_site_nav():
    config = yaml.safe_load(read(REPO / "mkdocs.yml"))

    def pages(entries):
        for entry in entries:
            for value in entry.values() if isinstance(entry, dict) else [entry]:
                if isinstance(value, list):
                    yield from pages(value)
                else:
                    yield value

    in_nav = set(pages(config["nav"]))
    assert in_nav == {str(path.relative_to(DOCS)) for path in PAGES}
    assert config["strict"] is True


# ------------------------------------------------------------------------------------------------- words


@pytest.mark.parametrize(
    "path",
    [README, *PAGES],
    ids=lambda path: str(path.relative_to(REPO)),
)
def test_the_pages_speak_in_the_projects_own_words(path):
    # "session" alone is a product word (a replay's session, Kafka's group session); a session of work is not.
    work = r"\b(first|second|third|fourth|this|that|previous|earlier|later|last|next|same) sessions?\b"
    found = re.search(rf"\bSPEC\b|\b[Ii]ssue \d|{work}", read(path))
    assert found is None, f"{path.name}: {found and found.group()}"


def test_the_readme_is_a_guide_that_starts_with_the_two_commands():
    lines = read(README).splitlines()
    assert len(lines) <= 300, len(lines)
    start = lines.index("```bash")
    assert lines[start + 1].startswith("make demo")
    assert lines[start + 2].startswith("make test")
    assert lines[start + 3] == "```"
