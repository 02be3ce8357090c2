"""The base of every typed config block, kept apart from the scenario schema so that any module
(data partitions, workloads, strategies) can define its own block without importing the schema."""

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class StrictModel(BaseModel):
    """Base of every config block: unknown keys are errors, values are frozen after validation."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


class PluginSpec(BaseModel):
    """A block that names a registered plugin; the other keys are that plugin's own config.

    The loader validates those keys against the plugin's config model, so a typo inside the
    block is reported with its full path like any other key.
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    name: str = Field(min_length=1)

    @property
    def params(self) -> dict[str, Any]:
        """The plugin-specific keys."""
        return dict(self.model_extra or {})
