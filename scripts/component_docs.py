#!/usr/bin/env python3
"""The inputs table of each CI/CD component in docs/ci.md, generated from its `spec:` header.

    python scripts/component_docs.py           # print the tables
    python scripts/component_docs.py --write   # rewrite them in docs/ci.md
    python scripts/component_docs.py --check   # exit 1 when docs/ci.md is out of step (a test runs it)

Each table sits between `<!-- inputs: templates/NAME.yml -->` and `<!-- end of inputs -->`
in docs/ci.md; everything else in the page is written by hand.
"""

from __future__ import annotations

import html
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "ci.md"
BLOCK = re.compile(
    r"(<!-- inputs: templates/(?P<name>[\w-]+)\.yml -->\n)(?P<table>.*?)(<!-- end of inputs -->)", re.S
)


def header(name: str) -> dict[str, Any]:
    text = (ROOT / "templates" / f"{name}.yml").read_text(encoding="utf-8")
    spec: dict[str, Any] = yaml.safe_load(text.split("\n---\n", 1)[0])["spec"]
    return spec


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _code(text: str) -> str:
    # A regex holds `|`, which a Markdown table takes for a cell border even in backticks.
    # `[...][...]` would read as a Markdown reference link (mkdocs-autorefs then warns).
    escaped = html.escape(text).replace("|", "&#124;").replace("[", "&#91;").replace("]", "&#93;")
    return f"<code>{escaped}</code>"


def table(name: str) -> str:
    """The Markdown table of the component's inputs, in the header's order."""
    rows = ["| input | type | default | accepts | what it is |", "| --- | --- | --- | --- | --- |"]
    for input_name, declaration in header(name)["inputs"].items():
        declared = declaration or {}
        kind = declared.get("type", "string")
        if "default" not in declared:
            default = "**required**"
        elif declared["default"] in ("", []):
            default = "empty"
        else:
            value = declared["default"]
            default = _code(value if isinstance(value, str) else json.dumps(value))
        if "options" in declared:
            accepts = " or ".join(_code(str(option)) for option in declared["options"])
        elif "regex" in declared:
            accepts = _code(declared["regex"])
        else:
            accepts = "any"
        rows.append(
            f"| `{input_name}` | {kind} | {default} | {accepts} | {_cell(declared.get('description', ''))} |"
        )
    return "\n".join(rows) + "\n"


def rewritten(text: str) -> str:
    """docs/ci.md with every inputs table regenerated."""
    return BLOCK.sub(lambda m: m.group(1) + table(m["name"]) + m.group(4), text)


def main(argv: list[str]) -> int:
    text = DOC.read_text(encoding="utf-8")
    documented = {m["name"] for m in BLOCK.finditer(text)}
    published = {p.stem for p in (ROOT / "templates").glob("*.yml")}
    if documented != published:
        print(
            f"docs/ci.md documents {sorted(documented)}, templates/ holds {sorted(published)}",
            file=sys.stderr,
        )
        return 1
    if argv[1:] == ["--write"]:
        DOC.write_text(rewritten(text), encoding="utf-8")
        return 0
    if argv[1:] == ["--check"]:
        if rewritten(text) != text:
            print(
                "docs/ci.md's inputs tables are out of step: python scripts/component_docs.py --write",
                file=sys.stderr,
            )
            return 1
        return 0
    for name in sorted(published):
        print(f"templates/{name}.yml\n{table(name)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
