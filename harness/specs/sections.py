"""What every section model of the target spec is (`Section`: strict, frozen, closed) and the
field types they share (`Items`: a YAML list kept as a tuple, `Headers`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, TypeVar

from pydantic import BeforeValidator

from acklab.evidence.documents.base import Document

T = TypeVar("T")


def _as_tuple(value: Any) -> Any:
    """A YAML or JSON list read as the tuple the frozen model keeps (its items still strict)."""
    return tuple(value) if isinstance(value, list) else value


Items = Annotated[tuple[T, ...], BeforeValidator(_as_tuple)]
Headers = Mapping[str, str]  # header name -> a literal value or env:NAME


class Section(Document):
    """A part of a target spec: strict, frozen, closed (a field the schema does not know is refused)."""
