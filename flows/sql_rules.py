"""Raw SQL a patched handler may not carry: statements that run programs, change the schema or
reach past the database the handler was given.

A handler records events and effects in its tables; it never needs to create, alter or drop
them, to run a program on the database server (PostgreSQL ``COPY ... TO PROGRAM``), to read the
server's files, to change how SQLite reads the file (``PRAGMA writable_schema``) or to open
another database (``ATTACH``). Every string a patched file holds is read as SQL could be —
literals anywhere (a statement assigned to a name is sent later), adjacent and ``+``-joined
literals folded, f-strings with their fields as placeholders — and a statement that begins with
one of these, or calls one of these functions, is refused. SQL the guard cannot read is refused
where it is sent: ``text()``, ``exec_driver_sql()``, ``executescript()``, ``raw()`` and
``RawSQL()`` take a literal (or a name only ever assigned literals), and ``execute()`` no
f-string.

Like every capability rule this is defence in depth: the served code's database role and the
pinned schema decide the verdict; this stops the patch before anyone is asked to approve it.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass

# What comes before a statement's first word: blanks, parentheses, comments.
_LEAD = re.compile(r"^[\s(]*(?:(?:--[^\n]*(?:\n|$)|/\*.*?\*/)[\s(]*)*", re.S)
# How a statement begins, and why a handler may not send it. Anchored and specific enough that
# the prose a handler also holds ("Do not reply", "Grant access to ...") is not read as SQL.
_BEGINS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern, re.I | re.S), why)
    for pattern, why in (
        (
            r"(create|alter|drop)\s+(or\s+replace\s+)?((temp|temporary|unlogged|unique|materialized|virtual|"
            r"global|local|constraint|event|foreign\s+data|foreign|procedural|trusted|recursive)\s+)*"
            r"(table|view|trigger|function|procedure|index|schema|database|role|user|extension|rule|policy|"
            r"type|sequence|language|domain|aggregate|operator|server|publication|subscription|cast|"
            r"collation|conversion|statistics|tablespace|transform|default\s+privileges|access\s+method|"
            r"owned|system|wrapper)\b",
            "changes the schema",
        ),
        (r"truncate\s+(table\s+)?(only\s+)?[\w.\"]+\s*(,|;|$|cascade\b|restrict\b|restart\b|continue\b)",
         "changes the schema (TRUNCATE)"),
        (r"comment\s+on\s+(table|column|view|function|index|schema|database|trigger|type|role|constraint)\b",
         "changes the schema (COMMENT ON)"),
        (r"(reindex|cluster)\s*(\(|(table|index|schema|database|system|verbose)\b)", "rewrites tables or indexes"),
        (r"security\s+label\s+(for|on)\b", "changes the schema (SECURITY LABEL)"),
        (r"(grant|revoke)\s+(all|select|insert|update|delete|truncate|references|trigger|create|connect|"
         r"temp\w*|execute|usage|set|maintain|alter\s+system|pg_\w+)\b", "changes privileges"),
        (r"pragma\s+[\w.]+\s*(=|\(|;|$)", "changes how SQLite reads the database (PRAGMA)"),
        (r"attach\s+(database\s+)?('|\"|:|\?|\x00|\w+\s+as\b)", "opens another database (ATTACH)"),
        (r"detach\s+(database\s+)?[\w\"]+\s*(;|$)", "closes a database (DETACH)"),
        (r"vacuum\s*($|;|\(|into\b|full\b|analyze\b|verbose\b|freeze\b)", "rewrites the database file (VACUUM)"),
        (r"do\s*(\$|'|language\b)", "runs code on the database server (DO)"),
        (r"load\s*'", "loads a library into the database server (LOAD)"),
        (r"(set|reset)\s+(session\s+|local\s+)?(role|session\s+authorization|session_replication_role)\b",
         "changes the database role or switches off triggers and constraints"),
        (r"alter\s+system\b", "changes the database server's configuration"),
        (r"copy\b.*\b(to|from)\s+program\b", "runs a program on the database server (COPY ... PROGRAM)"),
        (r"copy\b.*\b(to|from)\s+('|e')", "reads or writes a file on the database server (COPY ... 'file')"),
    )
)  # fmt: skip
# Anywhere in a statement: functions and names that reach the server's programs, files and schema.
_ANYWHERE: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern, re.I | re.S), why)
    for pattern, why in (
        (
            r"\b(pg_read_file|pg_read_binary_file|pg_ls_dir|pg_stat_file|pg_file_write|lo_import|lo_export|"
            r"dblink\w*|pg_terminate_backend|pg_cancel_backend|pg_reload_conf|set_config|"
            r"load_extension|writefile|readfile|fts3_tokenizer)\s*\(",
            "reaches the database server's files, processes or settings",
        ),
        (r"\bwritable_schema\b", "changes how SQLite reads the database (writable_schema)"),
        (r"\b(sqlite_master|sqlite_schema|sqlite_temp_master)\b", "reads or writes SQLite's schema table"),
        (r"\bpg_catalog\s*\.\s*pg_(authid|shadow|proc|trigger|rewrite|class|namespace|database)\b",
         "reaches PostgreSQL's catalog"),
    )
)  # fmt: skip
# Calls that send their first argument as SQL, read by no other rule: it must be readable here.
LITERAL_SQL_CALLS = frozenset({"text", "exec_driver_sql", "executescript", "raw", "RawSQL"})
STRING_SQL_CALLS = frozenset({"execute", "executemany"})
_HOLE = "\x00"  # an f-string's field: something the guard cannot read


@dataclass(frozen=True)
class SqlFinding:
    line: int
    rule: str
    detail: str


def statement_problem(sql: str) -> str | None:
    """Why the SQL text `sql` may not be sent by a handler (None when nothing in it is refused)."""
    for statement in sql.split(";"):
        body = statement[_LEAD.match(statement).end() :]  # type: ignore[union-attr]  # matches empty
        for pattern, why in _BEGINS:
            if pattern.match(body):
                return f"{why}: {_shown(statement)}"
        for pattern, why in _ANYWHERE:
            if pattern.search(statement):
                return f"{why}: {_shown(statement)}"
    return None


def _shown(statement: str) -> str:
    text = " ".join(statement.replace(_HOLE, "{...}").split())
    return repr(text if len(text) <= 80 else text[:77] + "...")


def folded(node: ast.AST) -> str | None:
    """The text of a string expression made of literals (`_HOLE` for an f-string's fields), or None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else _HOLE for v in node.values)  # type: ignore[misc]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = folded(node.left), folded(node.right)
        if left is not None and right is not None:
            return left + right
    return None


def _strings(tree: ast.AST) -> Iterator[tuple[ast.AST, str]]:
    """Every string expression of `tree`, the outermost of a folded ``+`` chain once."""
    inner: set[int] = set()
    for node in ast.walk(tree):
        if id(node) in inner:
            continue
        text = folded(node)
        if text is None:
            continue
        for child in ast.walk(node):
            if child is not node:
                inner.add(id(child))
        yield node, text


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _readable_names(tree: ast.Module) -> set[str]:
    """Names the file binds only by assigning string expressions made of literals (each checked as
    SQL where it is written): ``QUERY = "SELECT ..."`` at the top, ``sql = "..."`` in a function.
    A name bound any other way too (an argument, a loop variable, a computed value) is not."""
    plain: set[int] = set()
    good: set[str] = set()
    bad: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            readable = len(targets) == 1 and node.value is not None and folded(node.value) is not None
            for target in targets:
                if isinstance(target, ast.Name):
                    plain.add(id(target))
                    (good if readable else bad).add(target.id)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del) and id(node) not in plain:
            bad.add(node.id)
        elif isinstance(node, ast.arg):
            bad.add(node.arg)
    return good - bad


def _called(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def findings(tree: ast.Module) -> list[SqlFinding]:
    """Every refused statement in `tree`'s strings, and every SQL sent that cannot be read."""
    found: list[SqlFinding] = []
    docstrings = _docstrings(tree)
    for node, text in _strings(tree):
        if id(node) in docstrings:
            continue
        why = statement_problem(text)
        if why:
            found.append(SqlFinding(getattr(node, "lineno", 0), "raw-sql", f"a SQL statement that {why}"))
    readable = _readable_names(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        name = _called(node.func)
        sql = node.args[0]
        if name in LITERAL_SQL_CALLS:
            sent = folded(sql)
            if (sent is None and not (isinstance(sql, ast.Name) and sql.id in readable)) or (
                sent is not None and _HOLE in sent
            ):
                found.append(
                    SqlFinding(
                        node.lineno,
                        "dynamic-sql",
                        f"{name}() is given SQL built at run time, which the guard cannot read; write the "
                        "statement as one literal with bound parameters (:name, %s)",
                    )
                )
        elif name in STRING_SQL_CALLS:
            built = folded(sql)
            if built is not None and _HOLE in built:
                found.append(
                    SqlFinding(
                        node.lineno,
                        "dynamic-sql",
                        f"{name}() is given an f-string, which the guard cannot read; pass the values as "
                        "bound parameters",
                    )
                )
    return found
