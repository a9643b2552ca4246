"""What every typed document shares: strict, frozen pydantic models that write what they were given.

A model mirrors one object of a JSON Schema in ``evidence/schemas`` (`SCHEMA` names it, as
a kind or ``kind#/$defs/name``); `tests/evidence/test_documents.py` checks both against each
other. Three rules keep a document's JSON exactly what its builder meant:

* **Strict and closed**: no coercion (``"5"`` is not 5, ``true`` is not 1) and no field the
  schema does not know (``extra="forbid"``, like ``additionalProperties: false``).
* **Written as given**: `dump` writes the fields a builder passed (or a reader found), and
  no others: a field the schema leaves optional is absent until someone sets it, so a
  document read and written again is the same document.
* **Absent, never null**: a field marked `Omit` (an optional field the schema does not allow
  to be null) is left out when it is None, wherever it was set.

`read` is the one way a document comes back from JSON: it raises `EvidenceInvalid`
naming the field and the rule (exit 3; the evidence readers turn it into exit 7 or a
visible problem, as their context demands).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Self, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
)

from acklab.evidence.errors import EvidenceInvalid

T = TypeVar("T")
PROBLEM_LIMIT = 20


class _OmitWhenNone:
    """Marks an optional field the schema does not allow to be null: left out when None."""

    def __repr__(self) -> str:
        return "Omit"


OMIT = _OmitWhenNone()
Omit = Annotated[T | None, OMIT]


def problems_of(error: ValidationError, limit: int = PROBLEM_LIMIT) -> list[str]:
    """A validation error as 'path: message' lines, the way `evidence.validate` words them."""
    found = []
    for item in error.errors(include_url=False)[:limit]:
        where = "/".join(str(p) for p in item["loc"]) or "(document)"
        found.append(f"{where}: {item['msg']}")
    return found


class Document(BaseModel):
    """Base of every typed document and of the objects inside one."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, populate_by_name=True)
    # The schema object this model mirrors: a kind (``"trial"``) or ``"common#/$defs/delivery"``.
    SCHEMA: ClassVar[str] = ""
    _omitted: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        cls._omitted = frozenset(
            info.alias or name for name, info in cls.model_fields.items() if OMIT in info.metadata
        )

    @model_serializer(mode="wrap")
    def _leave_out_unset_nulls(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
        data = handler(self)
        if self._omitted and isinstance(data, dict):
            for name in self._omitted:
                if name in data and data[name] is None:
                    del data[name]
        return data

    def dump(self) -> dict[str, Any]:
        """The document as JSON-ready data: the fields set, none of the `Omit` ones that are None."""
        data: dict[str, Any] = self.model_dump(mode="json", by_alias=True, exclude_unset=True)
        return data

    @classmethod
    def read(cls, doc: Any, *, what: str | None = None) -> Self:
        """The document `doc` (parsed JSON) as this model; EvidenceInvalid names what is off."""
        try:
            return cls.model_validate(doc)
        except ValidationError as exc:
            found = problems_of(exc)
            name = what or cls.SCHEMA or cls.__name__
            raise EvidenceInvalid(
                f"{name} is not a valid {cls.__name__}: {found[0] if found else exc}", problems=found
            ) from None

    @classmethod
    def read_or_problems(cls, doc: Any) -> tuple[Self | None, list[str]]:
        """(the document, []) or (None, what keeps it from being one): for readers that show problems."""
        try:
            return cls.model_validate(doc), []
        except ValidationError as exc:
            return None, problems_of(exc)

    def but(self, **changes: Any) -> Self:
        """A copy with `changes` (fields set, so they are written); the model stays frozen."""
        return self.model_copy(update=changes)


def dump_all(items: Mapping[str, Document] | list[Document]) -> Any:
    """Documents inside a plain container, dumped."""
    if isinstance(items, Mapping):
        return {k: v.dump() for k, v in items.items()}
    return [v.dump() for v in items]
