"""The base of every typed config block, kept apart from the scenario schema so that any module
(data partitions, workloads, strategies) can define its own block without importing the schema."""

import math
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic_core import PydanticCustomError


def _finite(value: Any) -> Any:
    """Refuse an infinite or NaN float anywhere inside a free-form value (a plugin's own keys)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise PydanticCustomError("finite_number", "Input should be a finite number")
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return value


# A value of a plugin's own keys, typed later by the plugin's config; infinities and NaNs never are.
FiniteValue = Annotated[Any, AfterValidator(_finite)]


class StrictModel(BaseModel):
    """Base of every config block: unknown keys are errors, values are frozen after validation, and
    floats must be finite (``.inf`` and ``.nan`` would only surface as a NaN loss mid-run)."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False)


class PluginSpec(BaseModel):
    """A block that names a registered plugin; the other keys are that plugin's own config.

    The loader validates those keys against the plugin's config model, so a typo inside the
    block is reported with its full path like any other key.
    """

    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False)
    __pydantic_extra__: dict[str, FiniteValue] = Field(init=False)

    name: str = Field(min_length=1)

    @property
    def params(self) -> dict[str, Any]:
        """The plugin-specific keys."""
        return dict(self.model_extra or {})
