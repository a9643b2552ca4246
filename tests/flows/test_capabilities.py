"""The capability rules, read as an attacker would try them: every way in is named and refused."""

from __future__ import annotations

import pytest

from acklab.flows.capabilities import check, warnings
from acklab.flows.errors import FlowSpecInvalid
from acklab.flows.spec import DEFAULT_IMPORTS, load_spec, parse_spec
from tests.flows import hostile
from tests.flows.conftest import LIVE, ROOT, UNSAFE

PATH = "app/webhooks.py"
HEAD = "from __future__ import annotations\n\n"


# A spec that lists the very names an attacker reaches for: no list can allow the machinery.
WIDE = (
    *DEFAULT_IMPORTS,
    "import enum",
    "import dataclasses",
    "import typing",
    "import sqlalchemy",
    "from enum import bltns",
    "from dataclasses import inspect",
    "from typing import get_type_hints, types",
    "from sqlalchemy.util.compat import inspect",
    "from inspect import getmembers",
)


def findings(body: str, imports: tuple[str, ...] = WIDE) -> list[str]:
    return check(HEAD + body, path=PATH, imports=imports)


@pytest.mark.parametrize(
    "source",
    [UNSAFE, LIVE, (ROOT / "flows" / "recipes" / "receipt_handler.py.txt").read_text()],
    ids=["unsafe", "live", "recipe"],
)
def test_the_handlers_a_repair_starts_from_or_aims_at_pass(source):
    assert check(source, path=PATH, imports=DEFAULT_IMPORTS) == []


ATTACKS = {
    "sys.modules": ("import sys\nsys.modules['x'] = None\n", "machinery-module"),
    "aliased os._exit": ("import os as o\no._exit(0)\n", "machinery-module"),
    "from os import _exit as x": ("from os import _exit as x\nx(0)\n", "machinery-module"),
    "atexit": ("import atexit\n", "machinery-module"),
    "importlib": ("import importlib\n", "machinery-module"),
    "ctypes": ("from ctypes import pythonapi\n", "machinery-module"),
    "gc": ("import gc\n", "machinery-module"),
    "builtins": ("import builtins\n", "machinery-module"),
    "signal": ("import signal\n", "machinery-module"),
    "subprocess": ("import subprocess\n", "machinery-module"),
    "socket": ("import socket\n", "machinery-module"),
    "runtime of the app": ("from acklab.app import runtime\n", "import"),
    "the lab's verdicts": ("from acklab.harness import verdicts\n", "import"),
    "relative import of runtime": ("from . import runtime\n", "import"),
    "star import": ("from sqlalchemy import *\n", "import"),
    "exec": ("exec('1')\n", "machinery-name"),
    "eval in a default argument": ("def f(a=eval('1')):\n    return a\n", "machinery-name"),
    "compile": ("compile('1', 'x', 'eval')\n", "machinery-name"),
    "__import__ with a built string": ("__import__('o' + 's')\n", "machinery-name"),
    "globals()": ("globals()['x'] = 1\n", "machinery-name"),
    "setattr on a module": ("import json\nsetattr(json, 'loads', None)\n", "machinery-name"),
    "delattr": ("import json\ndelattr(json, 'loads')\n", "machinery-name"),
    "__builtins__": ("__builtins__['open']\n", "machinery-name"),
    "open": ("open('/etc/passwd')\n", "machinery-name"),
    "decorator running exec": ("@exec\ndef f():\n    pass\n", "machinery-name"),
    "SystemExit": ("raise SystemExit(0)\n", "machinery-name"),
    "getattr with a literal private name": (
        "import json\ngetattr(json, '_default_decoder')\n",
        "private-attribute",
    ),
    "getattr with a built name": ("import json\ngetattr(json, 'lo' + 'ads')\n", "dynamic-attribute"),
    "getattr passed around": ("g = getattr\n", "dynamic-attribute"),
    "__class__.__subclasses__": ("().__class__.__subclasses__()\n", "private-attribute"),
    "__globals__ of a function": ("def f():\n    pass\nf.__globals__\n", "private-attribute"),
    "sys through an allowed module": ("import datetime\ndatetime.sys\n", "machinery-attribute"),
    "sys.modules through an allowed module": (
        "import json\njson.decoder.re.sys.modules\n",
        "machinery-attribute",
    ),
    "frame globals": ("def f(g):\n    return g.gi_frame.f_globals\n", "machinery-attribute"),
    "typing.get_type_hints": ("from typing import get_type_hints\n", "machinery-attribute"),
    "format field reading __globals__": ("'{0.__globals__}'.format(print)\n", "format-attribute"),
    "match keyword reading __class__": (
        "match 1:\n    case int(__class__=c):\n        pass\n",
        "private-attribute",
    ),
    "ESC in a comment": ("# \x1b[1A\x1b[2K hidden\n", "control-character"),
    "bidi override in a string": ("x = 'abc\u202edef'\n", "control-character"),
    "zero-width space": ("x\u200b = 1\n", "control-character"),
    # identifiers are NFKC-normalised by the parser: fullwidth letters spell the same names
    "fullwidth exec": ("\uff45\uff58\uff45\uff43('1')\n", "machinery-name"),
    "fullwidth sys": ("import \uff53ys\n", "machinery-module"),
    # names from allowed modules that are modules or introspection (round two's bypasses)
    "from enum import bltns": ("from enum import bltns\nbltns.exec('1')\n", "module-attribute"),
    "enum.bltns": ("import enum\nenum.bltns.print('x')\n", "module-attribute"),
    "from dataclasses import inspect": ("from dataclasses import inspect\n", "module-attribute"),
    "dataclasses.inspect.getmembers": (
        "import dataclasses\ndataclasses.inspect.getmembers(dataclasses)\n",
        "module-attribute",
    ),
    "typing.types": ("import typing\ntyping.types.FunctionType\n", "module-attribute"),
    "from typing import types": ("from typing import types\n", "module-attribute"),
    "sqlalchemy.util.compat.inspect": (
        "import sqlalchemy\nsqlalchemy.util.compat.inspect\n",
        "module-attribute",
    ),
    "from sqlalchemy.util.compat import inspect": (
        "from sqlalchemy.util.compat import inspect\n",
        "module-attribute",
    ),
    "getmembers through an alias": ("from inspect import getmembers\n", "machinery-module"),
    "getattr_static": ("def f(i, o):\n    return i.getattr_static(o, 'x')\n", "machinery-attribute"),
    "vars() subscripted with a dunder": (
        "def f(g):\n    return vars(g)['__globals__']\n",
        "dunder-subscript",
    ),
    "a dict read by a dunder key": ("def f(d):\n    return d['__builtins__']\n", "dunder-subscript"),
    "a name not listed": ("from sqlalchemy import create_engine\n", "import"),
    "a module not listed": ("import pickle\n", "machinery-module"),
    "homoglyph function name": (
        "def pr\u043ecess(session, delivery):\n    return None\n",
        "confusable-identifier",
    ),
    "homoglyph variable": ("\u0455een = set()\n", "confusable-identifier"),
    # beneath the ORM, however it is reached: runtime objects as much as imports
    "the driver module through the dialect": (
        "def f(session):\n    return session.get_bind().dialect.dbapi\n",
        "driver-attribute",
    ),
    "the driver's connection": (
        "def f(session):\n    return session.connection().connection.driver_connection\n",
        "driver-attribute",
    ),
    "an uncalled .connection": ("def f(conn):\n    return conn.connection.cursor()\n", "driver-attribute"),
    "raw_connection of the engine": (
        "def f(engine):\n    return engine.raw_connection()\n",
        "driver-attribute",
    ),
    "getattr of the dialect": (
        "def f(s):\n    return getattr(s.get_bind(), 'dialect')\n",
        "driver-attribute",
    ),
    "Django's schema editor": (
        "def f(c):\n    with c.schema_editor() as editor:\n        return editor\n",
        "driver-attribute",
    ),
    "__dict__ of an object": ("def f(o):\n    return o.__dict__\n", "private-attribute"),
    "a frame through a coroutine": ("def f(c):\n    return c.cr_frame\n", "machinery-attribute"),
    # SQL no handler sends, wherever its text is
    "COPY TO PROGRAM": (
        "from sqlalchemy import text\nq = text(\"COPY (SELECT 1) TO PROGRAM 'id'\")\n",
        "raw-sql",
    ),
    "PRAGMA writable_schema": ("q = 'PRAGMA writable_schema = ON'\n", "raw-sql"),
    "ATTACH": ("q = \"ATTACH DATABASE '/tmp/x.db' AS x\"\n", "raw-sql"),
    "a trigger in a list": (
        "STATEMENTS = ['CREATE TRIGGER t AFTER INSERT ON f BEGIN DELETE FROM f; END']\n",
        "raw-sql",
    ),
    "DDL joined from literals": ("q = 'ALTER ' + 'TABLE fulfillments RENAME TO old'\n", "raw-sql"),
    "DDL after a harmless statement": ("q = 'SELECT 1; DROP TABLE fulfillments'\n", "raw-sql"),
    "DDL in an f-string": ("def f(name):\n    return f'DROP TABLE {name}'\n", "raw-sql"),
    "the server's files": ("q = \"SELECT pg_read_file('/etc/passwd')\"\n", "raw-sql"),
    "SQLite's schema table": ("q = 'SELECT sql FROM sqlite_master'\n", "raw-sql"),
    "a role switch": ("q = 'SET ROLE postgres'\n", "raw-sql"),
    "text() of a computed string": (
        "from sqlalchemy import text\ndef f(s, words):\n    return s.execute(text(' '.join(words)))\n",
        "dynamic-sql",
    ),
    "execute of an f-string": (
        "def f(cursor, name):\n    cursor.execute(f'DELETE FROM {name}')\n",
        "dynamic-sql",
    ),
}


@pytest.mark.parametrize("attack", ATTACKS)
def test_an_attack_is_refused_naming_its_line_and_rule(attack):
    body, rule = ATTACKS[attack]
    found = findings(body)
    assert any(f"capability rule {rule!r}" in f for f in found), found
    assert all(f.startswith(f"{PATH} line ") for f in found)
    assert all("\x1b" not in f and "\u202e" not in f for f in found)  # quoted lines are escaped


def test_a_coding_declaration_other_than_utf8_is_refused():
    # The interpreter would decode the file as UTF-7: other code than the guard read.
    found = check("# -*- coding: utf-7 -*-\nx = 1\n", path=PATH, imports=DEFAULT_IMPORTS)
    assert any("capability rule 'coding'" in f and "line 1" in f for f in found)
    assert check("# -*- coding: utf-8 -*-\nx = 1\n", path=PATH, imports=DEFAULT_IMPORTS) == []


FUTURE = ("from __future__ import annotations",)


def test_the_spec_lists_what_may_be_imported_name_by_name_but_never_the_machinery():
    assert findings("import uuid\n", imports=FUTURE) != []
    assert findings("import uuid\n", imports=(*FUTURE, "import uuid")) == []
    allowed = (*FUTURE, "from sqlalchemy.orm import Session")
    assert findings("from sqlalchemy.orm import Session\n", imports=allowed) == []
    assert findings("from sqlalchemy.orm import sessionmaker\n", imports=allowed) != []
    # no list can allow sys, os or atexit
    assert findings("import os\n", imports=(*FUTURE, "import os")) != []
    assert findings("import sys\n", imports=(*FUTURE, "import sys")) != []


def test_a_spec_in_the_old_format_is_refused_saying_how_to_write_it(tmp_path):
    doc = __import__("yaml").safe_load((ROOT / "flows" / "repair.yaml").read_text())
    doc["capabilities"]["imports"] = ["sqlalchemy", "__future__"]
    with pytest.raises(FlowSpecInvalid, match=r"'sqlalchemy' names a module.*from sqlalchemy import NAME"):
        parse_spec(doc, what="old.yaml")
    assert load_spec(ROOT / "flows" / "repair.yaml").imports  # the project's own spec is migrated


def test_a_confusable_word_in_a_string_is_a_warning_the_approver_sees():
    source = HEAD + 'if order.currency == "\u0415UR":\n    pass\n'
    assert check(source, path=PATH, imports=DEFAULT_IMPORTS) == []
    [warned] = warnings(source, path=PATH)
    assert "line 3" in warned
    assert "\u0415UR" in warned
    assert "mixes scripts" in warned
    assert warnings(LIVE, path=PATH) == []


@pytest.mark.parametrize("name", hostile.PATCHES)
def test_the_self_certifying_patches_break_capability_rules(name):
    source = {
        "verdicts-through-sys-modules": hostile.VERDICTS_SOURCE,
        "exit-0-under-pytest": hostile.EXIT_SOURCE,
        "hidden-behind-escapes": hostile.HIDDEN_SOURCE,
    }[name]
    found = check(source, path=PATH, imports=DEFAULT_IMPORTS)
    assert any("import sys" in f for f in found)
    if name != "verdicts-through-sys-modules":
        assert any("atexit" in f for f in found)
        assert any("._exit is private" in f for f in found)
    if name == "hidden-behind-escapes":
        assert any("control-character" in f and "U+001B" in f for f in found)


def test_the_sql_and_the_connections_a_handler_uses_stay_allowed():
    body = (
        "from sqlalchemy import select, text\n\n"
        "COUNT = 'SELECT count(*) FROM fulfillments WHERE event_id = :event_id'\n"
        "SUBJECT = 'Do not reply: grant access to your account, create your order, drop us a line'\n\n\n"
        "def f(session, conn, cursor, event_id):\n"
        "    session.execute(text(COUNT), {'event_id': event_id})\n"
        "    session.execute(text('INSERT INTO receipts (event_id) VALUES (:e) ON CONFLICT DO NOTHING'), {'e': event_id})\n"
        "    session.execute(select(1))\n"
        "    cursor.execute('SELECT 1 FROM receipts WHERE event_id = %s', [event_id])\n"
        "    sql = 'UPDATE orders SET status = :s WHERE order_id = :o'\n"
        "    session.execute(text(sql), {'s': 'paid', 'o': event_id})\n"
        "    with session.connection() as c:\n"
        "        return c, conn.execute(text(COUNT), {'event_id': event_id}), SUBJECT\n"
    )
    assert findings(body) == []
