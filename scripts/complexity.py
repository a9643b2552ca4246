"""Fail when a function of the given folders is more complex than LIMIT (radon's cyclomatic
complexity), naming each with its file, line and score.

`make lint` and the CI lint job run it over the packages. radon's own `cc -n` filters by letter
grade, whose bounds (D: 21-30, E: 31-40) do not fall at 25; its Python API gives the number.
Every block is counted: functions, methods, closures and the methods of nested classes, each on
its own (radon keeps a closure's branches out of the function that holds it).

    python scripts/complexity.py [--limit N] FOLDER_OR_FILE...
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from radon.visitors import Class, ComplexityVisitor, Function

LIMIT = 25


def blocks(found: Iterable[Function | Class]) -> Iterator[Function]:
    """Every function in `found`, its closures and every method of every class, nested or not."""
    for block in found:
        if isinstance(block, Class):
            yield from blocks([*block.methods, *block.inner_classes])
        else:
            yield block
            yield from blocks(block.closures)


def sources(paths: Iterable[str]) -> Iterator[Path]:
    for name in paths:
        path = Path(name)
        if path.is_file():
            yield path
        elif path.is_dir():
            yield from sorted(p for p in path.rglob("*.py") if ".venv" not in p.parts)
        else:
            raise SystemExit(f"complexity: {name!r} is neither a file nor a folder; name the package folders")


def too_complex(paths: Iterable[str], limit: int) -> list[str]:
    """`file:line name (score)` for every function above `limit`, most complex first."""
    found = []
    for path in sources(paths):
        module = ComplexityVisitor.from_code(path.read_text(encoding="utf-8"))
        for block in blocks([*module.functions, *module.classes]):
            if block.complexity > limit:
                found.append(
                    (block.complexity, f"{path}:{block.lineno} {block.fullname} ({block.complexity})")
                )
    return [line for _, line in sorted(found, key=lambda item: -item[0])]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--limit", type=int, default=LIMIT, help=f"the highest complexity allowed (default {LIMIT})"
    )
    parser.add_argument("paths", nargs="+")
    args = parser.parse_args(argv)
    found = too_complex(args.paths, args.limit)
    for line in found:
        print(line)
    if found:
        print(
            f"{len(found)} function(s) above cyclomatic complexity {args.limit}: split each into named steps",
            file=sys.stderr,
        )
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
