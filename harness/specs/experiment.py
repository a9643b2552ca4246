"""The experiment spec (``kind: experiment``) as one typed value: a stable experiment and its parameters.

Read once (`load_experiment_spec`) through its JSON Schema (``experiment.schema.json``, the
messages that name the field, the value and the fix), then held as an `ExperimentSpec`;
`tests/harness/test_target_spec.py` keeps the models and the schema in step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError

from acklab.evidence.documents.base import Omit, problems_of
from acklab.harness.errors import SpecError
from acklab.harness.specs.load import load_spec
from acklab.harness.specs.sections import Section

BurstSync = Literal["none", "last-byte", "single-packet"]


class ExperimentParameters(Section):
    """``parameters:``: run-wide settings (`harness.core.plan.RunSettings` fields of the same names)."""

    SCHEMA = "experiment#/properties/parameters"

    burst: Omit[int] = None
    burst_sync: Omit[BurstSync] = None
    max_attempts: Omit[int] = None
    time_compression: Omit[float] = None
    overlap_ratio: Omit[float] = None
    processing_delay_ms: Omit[int] = None
    handler_timeout_s: Omit[float] = None
    settle_ms: Omit[float] = None

    def given(self) -> dict[str, Any]:
        """The parameters the spec sets, by name."""
        return {
            name: getattr(self, name) for name in type(self).model_fields if name in self.model_fields_set
        }


class ExperimentSpec(Section):
    """An experiment spec: the stable experiment it `uses`, its trials and its parameters."""

    SCHEMA = "experiment"

    api_version: Literal["acklab/v1"] = Field(alias="apiVersion")
    kind: Literal["experiment"]
    name: str
    description: Omit[str] = None
    uses: str
    trials: Omit[int] = None
    parameters: ExperimentParameters = Field(default_factory=ExperimentParameters)


def load_experiment_spec(path: Path) -> ExperimentSpec:
    """A ``kind: experiment`` spec file as an `ExperimentSpec` (exit 3 naming the field when it is not one)."""
    _, doc = load_spec(path, expected_kind="experiment")
    try:
        return ExperimentSpec.model_validate(doc)
    except ValidationError as exc:
        found = problems_of(exc)
        raise SpecError(f"{path}: invalid experiment spec: {found[0] if found else exc}") from None
