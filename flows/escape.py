"""Text from a proposal, a model or a decisions file, made safe to show, record and publish.

Whatever a model writes (a diff, a rationale, its own name) and whatever a decisions file
says (actor, delegated_by, reason) is data, never instructions for a terminal, a markdown
renderer or git:

* `visible`: control and format characters (ESC, CR, backspace, NUL, DEL, C1 controls, bidi
  overrides U+202A-U+202E and U+2066-U+2069, zero-width characters, line separators...) become
  visible escapes such as ``\\x1b`` or ``\\u202e``, so a line cannot be overwritten, hidden or
  reordered on the approver's screen;
* `numbered`: a diff with a line number on every line, so nothing can vanish between two;
* `md_code`: a value quoted as inline code in an MR note: no quick action (``/merge``), no
  link, no mention or reference is interpreted;
* `quoted`: a value quoted on one line of a commit message, so it cannot forge a trailer;
* `line_break`: the first line-breaking character of a value that must be one line.
"""

from __future__ import annotations

import unicodedata

# Every character str.splitlines() breaks on: none may hide inside a one-line value.
LINE_BREAKS = frozenset("\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029")
# Control (Cc), format (Cf: bidi marks, zero-width, BOM...), line/paragraph separators, surrogates.
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def unsafe(char: str) -> bool:
    """Whether `char` may change how the text around it is displayed (tab excepted)."""
    return char != "\t" and unicodedata.category(char) in _UNSAFE_CATEGORIES


def _escape(char: str) -> str:
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def visible(text: str, *, keep_newlines: bool = True) -> str:
    """`text` with every unsafe character shown as an escape (newlines kept unless asked not to)."""
    return "".join(c if (c == "\n" and keep_newlines) or not unsafe(c) else _escape(c) for c in str(text))


def one_line(text: str, *, limit: int = 500) -> str:
    """`text` escaped onto a single line, at most `limit` characters (an ellipsis says it was cut)."""
    shown = visible(text, keep_newlines=False)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def hidden_count(text: str) -> int:
    """How many unsafe characters `text` holds besides its newlines."""
    return sum(1 for c in text if c != "\n" and unsafe(c))


def numbered(text: str) -> str:
    """Every line of `text`, escaped, behind its line number: a hidden line would leave a gap."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    width = len(str(len(lines)))
    return "\n".join(f"{n:>{width}} | {visible(line)}" for n, line in enumerate(lines, start=1))


def line_break(text: str) -> str | None:
    """The first line-breaking character of `text` (escaped), or None when it is one line."""
    for char in text:
        if char in LINE_BREAKS:
            return _escape(char)
    return None


def md_code(text: str, *, limit: int = 200) -> str:
    """`text` as GitLab-markdown inline code, safe in a table cell: nothing in it is interpreted."""
    shown = one_line(text, limit=limit).replace("|", "\\|")
    longest = run = 0
    for char in shown:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    fence = "`" * (longest + 1)
    pad = " " if shown.startswith("`") or shown.endswith("`") or not shown.strip() else ""
    return f"{fence}{pad}{shown}{pad}{fence}"


def quoted(text: str, *, limit: int = 200) -> str:
    """`text` in double quotes on one line, for a commit message (``"`` and ``\\`` escaped)."""
    return '"' + one_line(text, limit=limit).replace("\\", "\\\\").replace('"', '\\"') + '"'
