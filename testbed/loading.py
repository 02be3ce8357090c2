"""Load a scenario: safe YAML, ``--set`` overrides, schema and plugin validation, one-line errors.

Every problem becomes a `ScenarioError` whose message names the file (or the override), the
field path and, for a misspelt key, the closest valid key, e.g.::

    quickstart.yaml: training.stpes: unknown key (did you mean 'steps'?)
"""

from __future__ import annotations

import re
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from testbed.errors import ECHO_LIMIT, ScenarioError, did_you_mean, shorten
from testbed.scenario import KIND_BLOCKS, KIND_REQUIRES, ReportConfig, Scenario

Loc = tuple[Any, ...]
KINDS_WITH_WORKLOAD = ("workload", "federated")


# Bounds on what a scenario file may hold, checked before and right after parsing: a scenario is a
# page of YAML, and a huge file, a deeply nested value or YAML aliases that expand a few lines into
# millions of values would otherwise take minutes (or all the memory) to refuse.
MAX_SCENARIO_BYTES = 1 << 20
MAX_DEPTH = 32
MAX_VALUES = 100_000


def read_yaml(path: Path) -> dict[str, Any]:
    """Parse a YAML file with the safe loader (no Python tags) into a mapping."""
    try:
        if path.is_dir():
            raise ScenarioError(f"{path}: is a directory, not a scenario file")
        if not path.is_file():
            what = "not a regular file" if path.exists() else "no such scenario file"
            raise ScenarioError(f"{path}: {what}")
        size = path.stat().st_size
        if size > MAX_SCENARIO_BYTES:
            raise ScenarioError(f"{path}: {size} bytes; a scenario file may have at most {MAX_SCENARIO_BYTES} (1 MiB)")
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise ScenarioError(f"{path}: not a text file (UTF-8)") from None
    except OSError as err:  # unreadable (permissions), or a name the system refuses
        raise ScenarioError(f"{path}: cannot read the scenario file: {err.strerror or err}") from None
    except ValueError:  # a NUL byte in the name
        raise ScenarioError(f"{path}: no such scenario file") from None
    data = parse_yaml(text, str(path))
    if not isinstance(data, dict):
        raise ScenarioError(f"{path}: a scenario must be a mapping of keys, got {type(data).__name__}")
    return data


def parse_yaml(text: str, where: str, invalid: str | None = None) -> Any:
    """Parse YAML text (a file, or a ``--set`` value) with the safe loader, within the bounds above;
    ``invalid`` replaces the parser's own account of a syntax error."""
    if _bracket_depth(text) > MAX_BRACKET_DEPTH:  # the parser would take seconds to hit Python's recursion limit
        raise ScenarioError(f"{where}: values nested too deeply (at most {MAX_DEPTH} levels)")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ScenarioError(f"{where}: {invalid or f'invalid YAML{at}: {problem}'}") from None
    except RecursionError:
        raise ScenarioError(f"{where}: values nested too deeply (at most {MAX_DEPTH} levels)") from None
    _check_bounds(data, where)
    return data


# Flow brackets nested this deep are refused before parsing (deeper than any value `MAX_DEPTH`
# allows; only brackets inside quoted text could make a valid file reach it).
MAX_BRACKET_DEPTH = 200


def _bracket_depth(text: str) -> int:
    """The deepest nesting of YAML flow brackets ([ and {) in ``text``, counted without parsing."""
    depth = deepest = 0
    for char in re.sub(r"[^\[\]{}]+", "", text):
        depth = depth + 1 if char in "[{" else max(depth - 1, 0)
        deepest = max(deepest, depth)
    return deepest


def _check_bounds(data: Any, where: str) -> None:
    """Refuse a value nested deeper than `MAX_DEPTH`, more than `MAX_VALUES` values (YAML aliases
    count once per use: that is what validating and saving the scenario would expand), and text
    no file can hold (a lone surrogate such as ``"\\udcff"``)."""
    stack: list[tuple[Any, Loc]] = [(data, ())]
    count = 0
    while stack:
        value, loc = stack.pop()
        count += 1
        if len(loc) > MAX_DEPTH:
            raise ScenarioError(f"{where}: values nested too deeply (at most {MAX_DEPTH} levels)")
        if count > MAX_VALUES:
            raise ScenarioError(f"{where}: more than {MAX_VALUES} values (YAML aliases expanding?); "
                                "a scenario is a page of settings")
        if isinstance(value, dict):
            stack.extend((item, (*loc, key)) for key, item in value.items())
            stack.extend((key, loc) for key in value)
        elif isinstance(value, list):
            stack.extend((item, (*loc, index)) for index, item in enumerate(value))
        elif isinstance(value, str) and not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                field = ".".join(_key(part) for part in loc) or "(top level)"
                raise ScenarioError(f"{where}: {field}: {shorten(value)} is not valid Unicode "
                                    "(a lone surrogate escape)") from None


# Keys whose value selects which schema the rest of their block follows.
SWITCH_KEYS = frozenset({"type"})


def apply_override(raw: dict[str, Any], override: str) -> None:
    """Apply one ``a.b=value`` override in place; the value is parsed as YAML (so ``3`` is an int)."""
    key, sep, text = override.partition("=")
    if not sep or not key or any(not part for part in key.split(".")):
        raise ScenarioError(f"{_named_override(override)}: expected KEY.PATH=VALUE")
    value = parse_yaml(text, _named_override(override), invalid="value is not valid YAML") if text else ""
    node = raw
    parts = key.split(".")
    for depth, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            path = ".".join(parts[: depth + 1])
            raise ScenarioError(f"{_named_override(override)}: '{path}' is a value, not a section")
        node = child
    if node is not raw and parts[-1] in SWITCH_KEYS and node.get(parts[-1], value) != value:
        # Switching a block's type (``--set engine.type=ray``) leaves its old type's keys
        # meaningless, and the strict schema would refuse them: start the block afresh.
        node.clear()
    node[parts[-1]] = value


def load_raw(path: str | Path, overrides: typing.Sequence[str] = ()) -> dict[str, Any]:
    """Read a scenario file and apply overrides, without validating."""
    raw = read_yaml(Path(path))
    for override in overrides:
        apply_override(raw, override)
    return raw


def load_scenario(path: str | Path, overrides: typing.Sequence[str] = ()) -> Scenario:
    """Read, override and fully validate a scenario file."""
    return validate_raw(load_raw(path, overrides), source=str(path), overrides=overrides)


def validate_raw(raw: dict[str, Any], source: str, overrides: typing.Sequence[str] = ()) -> Scenario:
    """Validate a raw mapping against the schema and the plugins it names."""
    try:
        scenario = Scenario.model_validate(raw)
    except ValidationError as err:
        raise ScenarioError(describe_error(err, Scenario, raw, source, overrides)) from None
    check_kind_blocks(scenario, raw, source, overrides)
    check_plugins(scenario, raw, source, overrides)
    return with_audits(scenario, raw, source, overrides) if scenario.report.model_extra else scenario


REQUIRED_EXAMPLES = {
    "workload": "workload: {name: classifier}",
    "decentralized": "decentralized: {topology: {name: ring, n: 8}, sigma: 1.0}",
    "pretrain": "pretrain: {corpus: {source: stdlib_code}}",
}


def check_kind_blocks(scenario: Scenario, raw: dict, source: str, overrides: typing.Sequence[str]) -> None:
    """Refuse a block the scenario's kind does not read (it would be silently ignored), and a
    missing block the kind needs. A block equal to its default (as in a run folder's config.yaml,
    which lists every block) is not refused."""
    kind = scenario.kind
    reads = KIND_BLOCKS[kind]
    kind_source = _source_for(("kind",), source, overrides)
    unread = [block for block, value in raw.items()
              if block in Scenario.model_fields and block not in reads and block not in TOP_LEVEL_VALUES
              and value is not None and value != _default_block(block)]
    if unread:
        where = kind_source if kind_source != source else _source_for((unread[0],), source, overrides)
        these = "this block" if len(unread) == 1 else "these blocks"
        raise ScenarioError(f"{where}: {', '.join(unread)}: kind '{kind}' does not read {these}; remove "
                            f"{'it' if len(unread) == 1 else 'them'} (kind '{kind}' reads {', '.join(reads)})")
    for block in KIND_REQUIRES[kind]:
        if raw.get(block) is None:
            where = kind_source if kind_source != source else source
            raise ScenarioError(f"{where}: {block}: required for kind '{kind}' (e.g. {REQUIRED_EXAMPLES[block]})")


# The top-level keys that are values of every kind, not blocks.
TOP_LEVEL_VALUES = frozenset({"name", "kind", "description", "seed", "device"})


def _default_block(block: str) -> Any:
    """The JSON form of a block's default (None where the block has none)."""
    field = Scenario.model_fields[block]
    default = field.default_factory() if field.default_factory is not None else field.default  # type: ignore[call-arg]
    return default.model_dump(mode="json") if isinstance(default, BaseModel) else default


def check_plugins(scenario: Scenario, raw: dict, source: str, overrides: typing.Sequence[str]) -> None:
    """Validate the blocks that name registered plugins against the plugin's own config."""
    from testbed.data.select import check_data_selection, check_split
    from testbed.workloads import registry

    check_data_selection(scenario.data, _source_for(("data", "dataset"), source, overrides))
    check_split(scenario.data, scenario.data.test_fraction, _source_for(("data", "test_fraction"), source, overrides))
    if scenario.workload is None:
        if scenario.kind in KINDS_WITH_WORKLOAD:
            raise ScenarioError(f"{source}: workload: required for kind '{scenario.kind}' "
                                f"(e.g. workload: {{name: classifier}})")
        return
    name = raw["workload"]["name"]
    if not registry.is_registered(name):
        where = _source_for(("workload", "name"), source, overrides)
        valid = registry.workload_names()
        raise ScenarioError(f"{where}: workload.name: unknown workload {shorten(name)}{did_you_mean(name, valid)}; "
                            f"valid: {', '.join(sorted(valid))}")
    validate_plugin(registry.config_class(name), "workload", scenario.workload.params, raw, source, overrides)
    try:
        registry.check_function(name)(workload_config(scenario), scenario.data)
    except ScenarioError as err:
        raise ScenarioError(f"{_source_for(('workload',), source, overrides)}: {err}") from None


def with_audits(scenario: Scenario, raw: dict, source: str, overrides: typing.Sequence[str]) -> Scenario:
    """The scenario with each audit block of its report validated by the config of the audit a
    workload offers under that name (`testbed.workloads.audits`) and put in the block's place; an
    audit set in a scenario whose kind or report it does not serve is refused."""
    from testbed.workloads.audits import find_audit, offered_audits

    typed = {}
    for name, block in (scenario.report.model_extra or {}).items():
        audit = find_audit(name)
        if audit is None:  # the words pydantic gives any other unknown key
            valid = [*ReportConfig.model_fields, *offered_audits()]
            raise ScenarioError(f"{_source_for(('report', name), source, overrides)}: report.{name}: unknown key"
                                f"{did_you_mean(name, valid)}; valid keys: {', '.join(valid)}")
        if block is None:
            continue
        try:
            typed[name] = audit.Config.model_validate(block)
        except ValidationError as err:
            raise ScenarioError(describe_error(err, audit.Config, raw["report"][name], source, overrides,
                                               ("report", name))) from None
        if scenario.kind not in audit.kinds or scenario.report.kind != audit.report_kind:
            raise ScenarioError(f"{_source_for(('report',), source, overrides)}: report: {name}: set only in kind: "
                                f"{' or '.join(audit.kinds)} scenarios with report kind: {audit.report_kind}")
    return scenario.model_copy(update={"report": scenario.report.model_copy(update=typed)})


def workload_config(scenario: Scenario) -> BaseModel:
    """The typed config of the scenario's workload."""
    from testbed.workloads import registry

    assert scenario.workload is not None
    return registry.config_class(scenario.workload.name).model_validate(scenario.workload.params)


def validate_plugin(config_model: type[BaseModel], section: str, params: dict, raw: dict, source: str,
                    overrides) -> None:
    """Check that the other keys of ``raw[section]`` fit the plugin's config."""
    try:
        config_model.model_validate(params)
    except ValidationError as err:
        message = describe_error(err, config_model, raw[section], source, overrides, (section,), extra_keys=("name",))
        raise ScenarioError(message) from None


def describe_error(
    err: ValidationError, model: type[BaseModel], raw: Any, source: str, overrides=(), prefix: Loc = (),
    extra_keys: tuple[str, ...] = (),
) -> str:
    """Turn the first pydantic error into ``source: path: problem``."""
    first = err.errors()[0]
    loc = _input_path(first["loc"], raw)
    path = ".".join(_key(p) for p in prefix + loc) or "(top level)"
    where = _source_for(prefix + loc, source, overrides)
    kind = first["type"]
    if kind == "extra_forbidden":
        valid = list(extra_keys) + _valid_keys(model, first["loc"][:-1])
        return f"{where}: {path}: unknown key{did_you_mean(str(loc[-1]), valid)}; valid keys: {', '.join(valid)}"
    if kind == "union_tag_invalid":
        ctx = first["ctx"]
        field = ctx["discriminator"].strip("'")
        return f"{where}: {path}.{field}: unknown {path} {field} {shorten(ctx['tag'])}; valid: {ctx['expected_tags']}"
    if kind == "missing":
        return f"{where}: {path}: required field is missing"
    got = first.get("input")
    shown = f" (got {shorten(got)})" if not isinstance(got, dict | list) else ""
    message = first["msg"].removeprefix("Value error, ")  # a validator's own words need no label
    return f"{where}: {path}: {message}{shown}"


def _key(part: Any) -> str:
    """One key of a field path as a message shows it (a long key cut short)."""
    text = str(part)
    return text if len(text) <= ECHO_LIMIT else text[: ECHO_LIMIT - 3] + "..."


def _input_path(loc: Loc, raw: Any) -> Loc:
    """Drop pydantic's union tags from an error location, keeping only keys the user wrote."""
    kept: list[Any] = []
    node = raw
    for index, part in enumerate(loc):
        last = index == len(loc) - 1
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        elif not last or not isinstance(node, dict | list):
            continue  # a discriminator tag or a validator step (or a union member's tag), not a key of the file
        kept.append(part)
    return tuple(kept)


def _valid_keys(model: type[BaseModel], loc: Loc) -> list[str]:
    """The field names of the (sub-)model that an error location points into."""
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        if isinstance(current, type) and issubclass(current, BaseModel) and part in current.model_fields:
            current = _unwrap(current.model_fields[part].annotation)
        elif isinstance(current, tuple):  # a union: pick the member whose tag matches
            current = next((m for m in current if _tag(m) == part), current)
    if isinstance(current, tuple):
        return sorted({k for m in current for k in m.model_fields})
    return list(current.model_fields) if isinstance(current, type) and issubclass(current, BaseModel) else []


def _unwrap(annotation: Any) -> Any:
    """The model class (or tuple of union members) behind a field annotation, if any."""
    if typing.get_origin(annotation) is typing.Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    models = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
    if len(models) > 1:
        return tuple(models)
    if models:
        return models[0]
    if args and typing.get_origin(annotation) is list:
        return _unwrap(args[0])
    return annotation


def _tag(model: type[BaseModel]) -> Any:
    field = model.model_fields.get("type")
    return typing.get_args(field.annotation)[0] if field is not None else None


def _named_override(override: str) -> str:
    """``--set KEY=VALUE`` as a message names it, a long value cut short."""
    key, sep, value = override.partition("=")
    if len(key) > ECHO_LIMIT:
        key = key[: ECHO_LIMIT - 3] + "..."
    return f"--set {key}{sep}{value if len(value) <= ECHO_LIMIT else value[: ECHO_LIMIT - 3] + '...'}"


def _source_for(loc: Loc, source: str, overrides: typing.Sequence[str]) -> str:
    """Name the override that set a field, or else the scenario file."""
    dotted = ".".join(str(p) for p in loc)
    for override in reversed(list(overrides)):
        key = override.partition("=")[0]
        if dotted == key or dotted.startswith(key + ".") or key.startswith(dotted + "."):
            return _named_override(override)
    return source
