"""Load a scenario: safe YAML, ``--set`` overrides, schema and plugin validation, one-line errors.

Every problem becomes a `ScenarioError` whose message names the file (or the override), the
field path and, for a misspelt key, the closest valid key, e.g.::

    quickstart.yaml: training.stpes: unknown key (did you mean 'steps'?)
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from testbed.errors import ScenarioError, did_you_mean
from testbed.scenario import Scenario

Loc = tuple[Any, ...]
KINDS_WITH_WORKLOAD = ("workload", "federated")


def read_yaml(path: Path) -> dict[str, Any]:
    """Parse a YAML file with the safe loader (no Python tags) into a mapping."""
    if not path.is_file():
        raise ScenarioError(f"{path}: no such scenario file")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ScenarioError(f"{path}: invalid YAML{where}: {problem}") from None
    except UnicodeDecodeError:
        raise ScenarioError(f"{path}: not a text file") from None
    if not isinstance(data, dict):
        raise ScenarioError(f"{path}: a scenario must be a mapping of keys, got {type(data).__name__}")
    return data


# Keys whose value selects which schema the rest of their block follows.
SWITCH_KEYS = frozenset({"type"})


def apply_override(raw: dict[str, Any], override: str) -> None:
    """Apply one ``a.b=value`` override in place; the value is parsed as YAML (so ``3`` is an int)."""
    key, sep, text = override.partition("=")
    if not sep or not key or any(not part for part in key.split(".")):
        raise ScenarioError(f"--set {override}: expected KEY.PATH=VALUE")
    try:
        value = yaml.safe_load(text) if text else ""
    except yaml.YAMLError:
        raise ScenarioError(f"--set {override}: value is not valid YAML") from None
    node = raw
    parts = key.split(".")
    for depth, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            path = ".".join(parts[: depth + 1])
            raise ScenarioError(f"--set {override}: '{path}' is a value, not a section")
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
    check_plugins(scenario, raw, source, overrides)
    return scenario


def check_plugins(scenario: Scenario, raw: dict, source: str, overrides: typing.Sequence[str]) -> None:
    """Validate the blocks that name registered plugins against the plugin's own config."""
    from testbed.data.select import check_data_selection
    from testbed.workloads import registry

    check_data_selection(scenario.data, _source_for(("data", "dataset"), source, overrides))
    if scenario.workload is None:
        if scenario.kind in KINDS_WITH_WORKLOAD:
            raise ScenarioError(f"{source}: workload: required for kind '{scenario.kind}' (e.g. workload: {{name: classifier}})")
        return
    name = raw["workload"]["name"]
    if not registry.is_registered(name):
        where = _source_for(("workload", "name"), source, overrides)
        valid = registry.workload_names()
        raise ScenarioError(f"{where}: workload.name: unknown workload '{name}'{did_you_mean(name, valid)}; "
                            f"valid: {', '.join(sorted(valid))}")
    validate_plugin(registry.config_class(name), "workload", scenario.workload.params, raw, source, overrides)
    try:
        registry.check_function(name)(workload_config(scenario), scenario.data)
    except ScenarioError as err:
        raise ScenarioError(f"{_source_for(('workload',), source, overrides)}: {err}") from None


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
    path = ".".join(str(p) for p in prefix + loc) or "(top level)"
    where = _source_for(prefix + loc, source, overrides)
    kind = first["type"]
    if kind == "extra_forbidden":
        valid = list(extra_keys) + _valid_keys(model, first["loc"][:-1])
        return f"{where}: {path}: unknown key{did_you_mean(str(loc[-1]), valid)}; valid keys: {', '.join(valid)}"
    if kind == "union_tag_invalid":
        ctx = first["ctx"]
        field = ctx["discriminator"].strip("'")
        return f"{where}: {path}.{field}: unknown {path} {field} {ctx['tag']!r}; valid: {ctx['expected_tags']}"
    if kind == "missing":
        return f"{where}: {path}: required field is missing"
    got = first.get("input")
    shown = f" (got {got!r})" if not isinstance(got, dict | list) else ""
    return f"{where}: {path}: {first['msg']}{shown}"


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
        elif not last:
            continue  # a discriminator tag or a validator step, not a key of the file
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


def _source_for(loc: Loc, source: str, overrides: typing.Sequence[str]) -> str:
    """Name the override that set a field, or else the scenario file."""
    dotted = ".".join(str(p) for p in loc)
    for override in reversed(list(overrides)):
        key = override.partition("=")[0]
        if dotted == key or dotted.startswith(key + ".") or key.startswith(dotted + "."):
            return f"--set {override}"
    return source
