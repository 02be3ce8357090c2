"""The base of every typed config block, kept apart from the scenario schema so that any module
(data partitions, workloads, strategies) can define its own block without importing the schema."""

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Base of every config block: unknown keys are errors, values are frozen after validation."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)
