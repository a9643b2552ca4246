"""Click parameter types shared by the harness's commands."""

from __future__ import annotations

import math
from typing import Any

import click


class Finite(click.FloatRange):
    """A FloatRange that refuses NaN and infinities (exit 2 naming the option): click's own
    range lets them through, since every comparison with NaN is false."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = value if isinstance(value, float) else click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number; give e.g. 30", param, ctx)
        return super().convert(number, param, ctx)
