"""Coercions for reading untrusted documents: a mistyped field reads as empty, never raises."""

from __future__ import annotations

from typing import Any


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def as_int(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def as_str(value: Any, default: str = "") -> str:
    return value if isinstance(value, str) else default
