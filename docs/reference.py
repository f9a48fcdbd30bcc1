"""The reference parts of the documentation, generated from the code: settings, commands and plugins.

The pages stay hand-written; only the blocks between ``<!-- generated: NAME -->`` and
``<!-- end generated: NAME -->`` come from here, so prose and reference sit on one page and the reference
cannot drift from the code. ``python -m docs.reference`` (``make docs``) rewrites the blocks;
``--check`` only reports the pages whose blocks are stale and exits 1.

Sources: `streams.settings.Settings` (every field, its ``EYRIE_*`` variable, type, default and the
attribute docstring under it), `streams.cli.app` (every command, argument and option, as Typer declares
them), the plugin registry (`policies.framework.registry`, each plugin's ``Args`` model) and the built-in
profiles (`policies.framework.profile.BUILTIN_PROFILES`).
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

import typer
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

__all__ = [
    "BLOCKS",
    "DOCS",
    "PAGES",
    "cli_reference",
    "field_docs",
    "generate",
    "main",
    "plugin_reference",
    "profile_reference",
    "settings_reference",
    "stale_pages",
]

DOCS = Path(__file__).resolve().parent

MARKER = re.compile(
    r"(?P<start><!-- generated: (?P<name>[a-z-]+) -->\n)(?P<body>.*?)"
    r"(?P<end><!-- end generated: (?P=name) -->)",
    re.S,
)

# ------------------------------------------------------------------------------------------ markdown


def _escape(text: str) -> str:
    """Text outside code spans made safe for a page and a table cell: no raw HTML, no emphasis by accident,
    no column breaks."""
    parts = text.split("`")
    for index in range(0, len(parts), 2):  # even parts are outside backticks
        parts[index] = (
            parts[index].replace("<", "&lt;").replace(">", "&gt;").replace("*", r"\*").replace("|", r"\|")
        )
    for index in range(1, len(parts), 2):
        parts[index] = parts[index].replace("|", r"\|")
    return "`".join(parts)


def _prose(text: str | None) -> str:
    """A docstring or help text as one paragraph of markdown (reST double backticks become single)."""
    if not text:
        return ""
    text = inspect.cleandoc(text).replace("\b", "").replace("``", "`")
    return _escape(" ".join(text.split()))


def _paragraphs(text: str | None) -> list[str]:
    """Paragraphs of a docstring or help text; a paragraph of ``- `` items stays a list."""
    if not text:
        return []
    text = inspect.cleandoc(text).replace("\b", "")
    found = []
    for paragraph in re.split(r"\n\s*\n", text):
        if not paragraph.strip():
            continue
        pieces = re.split(r"\n(?=- )", paragraph)
        lead = [] if pieces[0].startswith("- ") else [_prose(pieces.pop(0))]
        items = [f"- {_prose(piece.removeprefix('- '))}" for piece in pieces]
        if lead and items:
            found.append("\n\n".join([*lead, "\n".join(items)]))
        else:
            found.append("\n".join([*lead, *items]))
    return found


def _code(value: str) -> str:
    return f"`` {value} ``" if "`" in value else f"`{value}`"


# ---------------------------------------------------------------------------------------- model fields


def field_docs(model: type[BaseModel]) -> dict[str, str]:
    """Field name → the docstring written under it in the class body (pydantic does not keep these unless a
    model asks it to, and the settings are documented this way)."""
    docs: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)) or cls is BaseModel:
            continue
        try:
            source = textwrap.dedent(inspect.getsource(cls))
        except (OSError, TypeError):
            continue
        (node,) = ast.parse(source).body
        assert isinstance(node, ast.ClassDef)
        body = node.body
        for statement, following in zip(body, [*body[1:], None], strict=True):
            if (
                isinstance(statement, ast.AnnAssign)
                and isinstance(statement.target, ast.Name)
                and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                docs[statement.target.id] = following.value.value
    return docs


def _type_name(annotation: Any) -> str:
    origin = get_origin(annotation)
    if origin is Literal:
        return " \\| ".join(_code(str(value)) for value in get_args(annotation))
    if origin in (Union, UnionType):
        members = [arg for arg in get_args(annotation) if arg is not type(None)]
        return " or ".join(_type_name(member) for member in members)
    if origin is not None and get_args(annotation) and hasattr(origin, "__metadata__") is False:
        name = getattr(origin, "__name__", str(origin))
        if name == "Annotated":
            return _type_name(get_args(annotation)[0])
        inner = ", ".join(_type_name(arg) for arg in get_args(annotation))
        return f"{name}[{inner}]"
    if annotation is SecretStr:
        return "secret"
    if isinstance(annotation, type):
        if issubclass(annotation, Path):
            return "path"
        if issubclass(annotation, BaseModel):
            return "object"
        if annotation.__module__.startswith("schemas"):
            return "resources"
        return annotation.__name__
    text = str(annotation).replace("typing.", "")
    return re.sub(r"Annotated\[([^,\]]+),.*", r"\1", text)


_BOUNDS = (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<"), ("min_length", "length ≥"))


def _constraints(info: FieldInfo) -> str:
    found = []
    for item in info.metadata:
        for attribute, symbol in _BOUNDS:
            value = getattr(item, attribute, None)
            if value is not None:
                found.append(f"{symbol} {_number(value)}")
        if getattr(item, "max_length", None) is not None:
            found.append(f"length ≤ {item.max_length}")
        if getattr(item, "pattern", None) is not None:
            found.append(f"matches {_code(item.pattern)}")
    return ", ".join(found)


def _number(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _default(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    value = info.default_factory() if info.default_factory is not None else info.default  # type: ignore[call-arg]
    if value is PydanticUndefined:
        return "required"
    if value is None:
        return "unset"
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json", by_alias=True, exclude_none=True)
    elif isinstance(value, list):
        value = [
            item.model_dump(mode="json", by_alias=True, exclude_none=True)
            if isinstance(item, BaseModel)
            else item
            for item in value
        ]
    if isinstance(value, bool):
        return _code(str(value).lower())
    if isinstance(value, int | float):
        return _code(_number(value))
    if isinstance(value, str):
        return _code(value) if value else '`""`'
    if isinstance(value, dict | list):
        return _code(json.dumps(dict(value) if isinstance(value, dict) else value, separators=(", ", ": ")))
    return _code(str(value))


def _fields_table(
    model: type[BaseModel], *, by_alias: bool = True, notes: dict[str, str] | None = None
) -> list[str]:
    docs = {**(notes or {}), **field_docs(model)}
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for name, info in model.model_fields.items():
        key = info.alias if by_alias and info.alias else name
        kind = _type_name(info.annotation)
        bounds = _constraints(info)
        rows.append(
            f"| `{key}` | {kind}{f' ({bounds})' if bounds else ''} | {_default(info)} | "
            f"{_prose(docs.get(name) or docs.get(key) or info.description)} |"
        )
        if not (docs.get(name) or docs.get(key) or info.description):
            raise LookupError(f"{model.__module__}.{model.__qualname__}.{name} has no description")
    return rows


# -------------------------------------------------------------------------------------------- settings

SETTING_NOTES: dict[str, str] = {
    "bootstrap_servers": "Kafka brokers to connect to, `HOST:PORT[,HOST:PORT...]`. "
    "`KAFKA_BOOTSTRAP_SERVERS`, when set, overrides this setting from the file and "
    "`EYRIE_BOOTSTRAP_SERVERS`; a `--bootstrap-servers` flag overrides everything.",
    "topic_prefix": "Prefix of every topic name (`eyrie.metrics`, ...) and of the consumer groups "
    "(`eyrie-worker`, `eyrie-applier`). Two pipelines with different prefixes share a broker without "
    "seeing each other.",
    "client_id": "Kafka client id of every producer, consumer and admin client eyrie creates.",
    "request_timeout_ms": "How long a Kafka request may take before the client gives up on it.",
    "data_dir": "Where a worker or an applier keeps its local table files (under `worker/` and `applier/`); "
    "with the `rocksdb://` store this is its state on disk.",
    "sasl_mechanism": "SASL mechanism, with a `SASL_*` protocol.",
    "sasl_username": "SASL user; required with a `SASL_*` protocol, refused without one.",
    "sasl_password": "SASL password (never printed: it shows as `**********`). Prefer `sasl_password_file`, "
    "so it sits on no command line and in no settings file.",
    "ssl_keyfile": "Private key (PEM) of `ssl_certfile`.",
    "sasl_password_file": "A file holding the SASL password (a final newline is dropped). Not stored: the "
    "loader reads the file into `sasl_password`; the two count as one setting, so the later source wins.",
}
"""Descriptions of the settings that carry no docstring in `Settings` (and of the password file, which
the loader reads but the model does not hold)."""


def _cli_flags() -> dict[str, list[str]]:
    """Setting name → the command-line flags that set it (a flag beats the environment and the file)."""
    from streams.cli import app

    aliases = {"bootstrap": "bootstrap_servers"}
    found: dict[str, list[str]] = {}
    for _, command in _commands(typer.main.get_command(app), ["eyrie"]):
        # Only commands that load settings (they take --config): `broker up --data-dir` is the broker's.
        if not any(param.name == "config" for param in command.params):
            continue
        for param in command.params:
            name = aliases.get(param.name or "", param.name or "")
            if param.param_type_name == "option" and name:
                flags = found.setdefault(name, [])
                for flag in param.opts:
                    if flag.startswith("--") and flag not in flags:
                        flags.append(flag)
    return found


def settings_reference() -> str:
    from streams.settings import Settings

    docs = field_docs(Settings)
    flags = _cli_flags()
    fields: list[tuple[str, FieldInfo | None]] = [
        *Settings.model_fields.items(),
        ("sasl_password_file", None),
    ]
    lines = [
        "| setting | environment variable | flag | default |",
        "|---|---|---|---|",
    ]
    for name, info in fields:
        default = _default(info) if info is not None else "unset"
        flag = ", ".join(f"`{flag}`" for flag in flags.get(name, [])) or ""
        lines.append(f"| [`{name}`](#{name}) | `EYRIE_{name.upper()}` | {flag} | {default} |")
    for name, info in fields:
        description = _prose(docs.get(name) or SETTING_NOTES.get(name))
        if not description:
            raise LookupError(f"setting {name} has no description: add a docstring under it in Settings")
        lines += ["", f"### `{name}`", ""]
        if info is not None:
            kind = _type_name(info.annotation)
            bounds = _constraints(info)
            lines.append(f"- type: {kind}{f' ({bounds})' if bounds else ''}; default: {_default(info)}")
        else:
            lines.append("- type: path; default: unset")
        flag = ", ".join(f"`{flag}`" for flag in flags.get(name, []))
        lines.append(f"- environment: `EYRIE_{name.upper()}`{f'; flag: {flag}' if flag else ''}")
        lines += ["", description]
    return "\n".join(lines)


# -------------------------------------------------------------------------------------------- commands


def _commands(command: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        if not getattr(sub, "hidden", False):
            yield from _commands(sub, [*path, name])


def _param_type(param: Any) -> str:
    annotation = param.type_descriptor.annotation
    if param.param_type_name == "option" and param.is_flag:
        return "flag"
    repeat = get_origin(annotation) is list
    inner = get_args(annotation)[0] if repeat else annotation
    name = "path" if inner is Path else getattr(inner, "__name__", str(inner))
    if (param.param_type_name == "argument" and param.nargs == -1) or repeat:
        return f"{name}, repeatable"
    return name


def _param_default(param: Any) -> str:
    if param.required:
        return "required"
    default = param.default
    if param.param_type_name == "option" and param.is_flag:
        if param.secondary_opts:
            return _code(param.opts[0] if default else param.secondary_opts[0])
        return "off" if not default else "on"
    if default is None or default == []:
        return ""
    if isinstance(default, float) and default.is_integer():
        return _code(str(int(default)))
    return _code(str(default))


def _param_names(param: Any) -> str:
    if param.param_type_name == "argument":
        return _code((param.name or "").upper())
    return ", ".join(_code(flag) for flag in [*param.opts, *param.secondary_opts])


SECURITY_PANEL = "Kafka security"


def _usage(path: list[str], command: Any) -> str:
    pieces = [" ".join(path)]
    if any(param.param_type_name == "option" for param in command.params):
        pieces.append("[OPTIONS]")
    if getattr(command, "commands", None):
        pieces.append("COMMAND [ARGS]...")
    for param in command.params:
        if param.param_type_name == "argument":
            name = (param.name or "").upper()
            name = f"{name}..." if param.nargs == -1 else name
            pieces.append(name if param.required else f"[{name}]")
    return " ".join(pieces)


def _params_table(params: list[Any]) -> list[str]:
    rows = ["| argument or option | type | default | meaning |", "|---|---|---|---|"]
    for param in params:
        meaning = _prose(getattr(param, "help", None))
        if param.envvar:
            meaning = f"{meaning} (environment: `{param.envvar}`)".strip()
        rows.append(f"| {_param_names(param)} | {_param_type(param)} | {_param_default(param)} | {meaning} |")
    return rows


def cli_reference() -> str:
    from streams.cli import app

    root = typer.main.get_command(app)
    security: list[Any] = []
    lines: list[str] = []
    commands = list(_commands(root, ["eyrie"]))
    lines += ["| command | what it does |", "|---|---|"]
    for path, command in commands[1:]:
        anchor = "-".join(path)
        summary = (_paragraphs(command.help) or [""])[0]
        lines.append(f"| [`{' '.join(path)}`](#{anchor}) | {summary} |")
    for path, command in commands:
        # The root's options are global; commands are sections, a group's commands its subsections.
        lines += ["", f"{'#' * max(2, min(len(path), 3))} `{' '.join(path)}`", ""]
        lines += ["```text", _usage(path, command), "```", ""]
        for paragraph in _paragraphs(command.help):
            lines += [paragraph, ""]
        own = [param for param in command.params if getattr(param, "rich_help_panel", None) != SECURITY_PANEL]
        shared = [
            param for param in command.params if getattr(param, "rich_help_panel", None) == SECURITY_PANEL
        ]
        if own:
            lines += _params_table(own)
            lines.append("")
        if shared:
            security = security or shared
            lines += ["With the [Kafka security options](#kafka-security-options).", ""]
        if getattr(command, "commands", None):
            subcommands = ", ".join(
                f"`{name}`" for name, sub in command.commands.items() if not getattr(sub, "hidden", False)
            )
            lines += [f"Commands: {subcommands}.", ""]
    lines += [
        "## Kafka security options",
        "",
        "Every command that talks to Kafka takes these; each also has a setting and an environment "
        "variable ([configuration](configuration.md)). A flag beats the environment, which beats the "
        "settings file.",
        "",
        *_params_table(security),
    ]
    return "\n".join(lines).strip("\n")


# --------------------------------------------------------------------------------------------- plugins


def _extension_points(spec: Any) -> list[str]:
    from policies.framework import contract
    from policies.framework.profile import Handle

    protocols = {
        "preEnqueue": contract.PreEnqueuePlugin,
        "queueSort": contract.QueueSortPlugin,
        "preFilter": contract.PreFilterPlugin,
        "filter": contract.FilterPlugin,
        "postFilter": contract.PostFilterPlugin,
        "preScore": contract.PreScorePlugin,
        "score": contract.ScorePlugin,
        "reserve": contract.ReservePlugin,
        "permit": contract.PermitPlugin,
    }
    assert set(protocols) == set(contract.EXTENSION_POINTS)
    plugin = spec.factory(spec.args() if spec.args is not None else None, Handle())
    return [point for point, protocol in protocols.items() if isinstance(plugin, protocol)]


ARG_NOTES: dict[str, dict[str, str]] = {
    "NodeResourcesFit": {
        "scoringStrategy": "`type`: `LeastAllocated`, `MostAllocated` or `RequestedToCapacityRatio`; "
        "`resources`: the `[{name, weight}]` scored (extended resources too); `requestedToCapacityRatio`: "
        "`{shape: [{utilization, score}]}`, utilisation 0..100 to score 0..10, for RequestedToCapacityRatio.",
    },
    "LimitSum": {
        "resource": "The resource whose limits are summed.",
        "ratio": "The share of allocatable the limits may reach.",
    },
    "RoleSpread": {
        "groupLabel": "The label that names a pod's group (a Redis cluster, say).",
        "roleLabel": "The label that names a pod's role in its group.",
        "role": "The role whose pods are spread.",
        "ratio": "The share of a group's pods of that role one node may hold.",
    },
    "Coscheduling": {
        "podGroupBackoffSeconds": "How long a group that timed out or failed waits before it is tried again.",
    },
    "TargetLoadPacking": {
        "targetUtilization": "X: the cpu utilisation (percent of capacity) up to which nodes are packed.",
        "defaultRequests": "The cpu counted for a container with neither a limit nor a request.",
        "defaultRequestsMultiplier": "A container's cpu request is multiplied by this when it has no limit "
        "(upstream's field is a string; a number is accepted too).",
    },
    "LoadVariationRiskBalancing": {
        "safeVarianceMargin": "m in σ' = m·σ^(1/s). A negative value is refused (upstream turns it into 1).",
        "safeVarianceSensitivity": "s in σ' = m·σ^(1/s). A negative value is refused.",
        "variant": "`upstream`: scheduler-plugins' formula; `kep`: the Trimaran KEP's older one.",
    },
    "LoadThresholds": {
        "thresholds": "Per metric, the largest share of allocatable that measured load, pods placed since "
        "and this pod may reach together.",
    },
    "PeakReference": {
        "ratio": "The share of allocatable that the peak hourly mean plus the pod may reach.",
        "resources": "The resources checked.",
    },
    "GlobalVarianceMin": {
        "resources": "`[{name, weight}]`: the resources whose utilisation variance is weighed, and how much.",
    },
    "PodFitsResourceOnPortrait": {
        "overSellRate": "For nodes without an `oversell_rate` of their own: requested cpu may reach "
        "allocatable × this.",
    },
    "ResourceBalanceOnPortrait": {
        "resources": "`[{name, weight, target}]`: each resource's target and its weight in the score.",
    },
}
"""Meanings of the plugin args whose models carry no docstring under the field."""

BATCH_ARG_NOTES: dict[str, str] = {
    "population": "Eagles (candidate assignments) per iteration.",
    "iterations": "Iterations of the optimiser per batch.",
    "seed": "Mixed with the batch's pod uids: the same batch always gets the same assignment.",
    "objective": "`score`: Σ S_N, the node scores of the paper's model; `z`: Z_avg of the cluster after "
    "the batch (lower is better).",
    "local_search": "Finish with single-pod moves while Σ Z(i) falls.",
    "resources": "The resources of the model (the paper's four by default).",
    "critical_load": "The critical load T_crit of the load term, one for all resources or per resource.",
    "weights": "The class weights `{mu: {class: {resource: w}}, nu: {...}}` for the classes "
    "`compressible`, `incompressible` and `balanced` (give both mu and nu); default: the model's.",
}
"""Meanings of a batch profile's ``batch_args``."""


def plugin_reference() -> str:
    from policies.framework.registry import registry

    specs = registry()
    lines = ["| plugin | extension points | module | what it does |", "|---|---|---|---|"]
    seen: dict[str, str] = {}
    for name, spec in specs.items():
        module = spec.factory.__module__
        summary = _prose((sys.modules[module].__doc__ or "").strip().split("\n\n")[0])
        if module in seen:
            summary = f"Another name for [`{seen[module]}`](#{seen[module].lower()})."
        seen.setdefault(module, name)
        points = ", ".join(f"`{point}`" for point in _extension_points(spec))
        lines.append(f"| [`{name}`](#{name.lower()}) | {points} | `{module}` | {summary} |")
    for name, spec in specs.items():
        lines += ["", f"### `{name}`", ""]
        first = seen[spec.factory.__module__]
        if first != name:
            lines.append(f"The same plugin as [`{first}`](#{first.lower()}).")
            continue
        for paragraph in _paragraphs(sys.modules[spec.factory.__module__].__doc__):
            lines += [paragraph, ""]
        if spec.args is None:
            lines.append("Takes no args.")
        else:
            lines.append(f"Args (the `pluginConfig` entry named `{name}`):")
            lines += ["", *_fields_table(spec.args, notes=ARG_NOTES.get(name))]
    return "\n".join(lines)


def profile_reference() -> str:
    import yaml

    from policies.batch.config import BatchArgs
    from policies.clusters.policy import ClusterPolicy
    from policies.framework.profile import BUILTIN_PROFILES, DEFAULT_PLUGINS, ProfileSet

    profiles = ProfileSet.builtin()
    lines = [
        "| profile | queue sort | filters, in order | scores (weight) | placement |",
        "|---|---|---|---|---|",
    ]
    for name in BUILTIN_PROFILES:
        profile = profiles.get(name)
        assert profile is not None
        filters = ", ".join(plugin.name for plugin in profile.filter)
        scores = ", ".join(f"{plugin.name} {weight}" for plugin, weight in profile.score)
        if profile.batch is None:
            mode = "one pod per cycle"
        elif profile.batch.algorithm == "orders":
            mode = (
                f"batch: `orders`, {profile.batch.batch_size} pods or {profile.batch.batch_wait:g} s, "
                "each in the best of a few orders"
            )
        else:
            mode = (
                f"batch: `{profile.batch.algorithm}`, {profile.batch.batch_size} pods or "
                f"{profile.batch.batch_wait:g} s, fitness `{profile.batch.args.objective}`"
            )
        lines.append(f"| `{name}` | {profile.queue_sort.name} | {filters} | {scores} | {mode} |")
    default_set = "; ".join(
        f"{point}: {', '.join(plugin for plugin, _ in plugins)}"
        for point, plugins in DEFAULT_PLUGINS.items()
        if plugins
    )
    lines += ["", f"The default plugin set every profile starts from: {default_set}.", ""]
    lines += ["Their documents, as `eyrie profiles show NAME` prints them:", ""]
    for name, document in BUILTIN_PROFILES.items():
        lines += [f"`{name}`:", "", "```yaml", yaml.safe_dump(document, sort_keys=False).strip(), "```", ""]
    lines += ["#### `batch_args`", "", *_fields_table(BatchArgs, by_alias=False, notes=BATCH_ARG_NOTES), ""]
    lines += ["#### `clusterPolicy`", "", *_fields_table(ClusterPolicy, by_alias=False)]
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------- pages

BLOCKS: dict[str, Callable[[], str]] = {
    "settings": settings_reference,
    "commands": cli_reference,
    "plugins": plugin_reference,
    "builtin-profiles": profile_reference,
}
"""Block name → what fills it."""

PAGES: dict[str, tuple[str, ...]] = {
    "configuration.md": ("settings",),
    "cli.md": ("commands",),
    "profiles.md": ("builtin-profiles", "plugins"),
}
"""Page → the generated blocks it must hold."""


def generate(text: str, blocks: dict[str, str]) -> str:
    """`text` with every generated block replaced by its current content."""

    def fill(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in blocks:
            raise LookupError(f"unknown generated block {name!r}")
        return f"{match['start']}{blocks[name]}\n{match['end']}"

    return MARKER.sub(fill, text)


def stale_pages(docs: Path = DOCS) -> dict[Path, str]:
    """Page → its text with fresh blocks, for every page whose committed blocks differ (or are missing)."""
    blocks = {name: make() for name, make in BLOCKS.items()}
    stale: dict[Path, str] = {}
    for page, names in PAGES.items():
        path = docs / page
        text = path.read_text(encoding="utf-8")
        present = {match["name"] for match in MARKER.finditer(text)}
        if missing := set(names) - present:
            raise LookupError(f"{path}: no generated block {sorted(missing)} (add its markers)")
        fresh = generate(text, blocks)
        if fresh != text:
            stale[path] = fresh
    return stale


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    check = args == ["--check"]
    if args and not check:
        print("usage: python -m docs.reference [--check]", file=sys.stderr)
        return 2
    stale = stale_pages()
    for path, text in stale.items():
        if check:
            print(f"stale: {path.relative_to(DOCS.parent)} (run `make docs`)", file=sys.stderr)
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(DOCS.parent)}")
    return 1 if check and stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
