"""The scope guard on an ordinary Django view (`tests.consumers.django_shop`), read, never run.

The view imports as Django projects do — ``from .models import Fulfillment`` relative to its own
package, ``from django.db import transaction`` (a submodule), ``from django.conf import
settings`` (an object that reads the project's settings when touched) — and the allowlist is
what `flow init` makes of those imports. The guard decides on it without the lab importing
anything of the shop or of Django, and decides the same whatever the lab imported before.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from acklab.flows import guard
from acklab.flows.diffs import make_diff
from acklab.flows.init import handler_imports
from acklab.flows.spec import parse_spec
from tests.consumers.django_shop import FIXED_VIEW, VIEW, fix_diff, git, make_django_shop

FOREIGN = ("django", "stripe", "orders", "shop", "asgiref", "sqlparse")


@pytest.fixture
def shop(tmp_path):
    return make_django_shop(tmp_path / "shop")


def flow_doc(repo: Path, *extra: str) -> dict:
    """The flow spec `flow init` writes for the shop's view (its imports as the allowlist), plus `extra`."""
    imports, notes = handler_imports((repo / VIEW).read_text(), path=VIEW, root=repo)
    assert notes == []
    return {
        "apiVersion": "acklab/v1",
        "kind": "flow",
        "name": "repair-django-shop",
        "target": "shop.target.yaml",
        "scope": {"allow": [VIEW], "deny": ["tests/", "shop.target.yaml"]},
        "limits": {"max_files": 1, "max_changed_lines": 200},
        "capabilities": {"imports": [*imports, *extra]},
        "experiments": {"reproduce": ["concurrent-duplicates"], "trials": 1},
        "verify": {"commands": [{"name": "ruff", "argv": ["python", "-m", "ruff", "check", VIEW]}]},
        "checkpoints": ["reproduce", "propose", "approve", "apply", "verify", "publish"],
    }


def flow_spec(repo: Path, *extra: str):
    return parse_spec(flow_doc(repo, *extra), what="repair.flow.yaml")


def edit(repo: Path, old: str, new: str) -> str:
    source = (repo / VIEW).read_text()
    assert old in source
    return make_diff(VIEW, source, source.replace(old, new, 1))


def judge(repo: Path, diff: str, *extra: str) -> guard.GuardResult:
    return guard.check(diff, spec=flow_spec(repo, *extra), repo=repo, commit=git(repo, "rev-parse", "HEAD"))


def test_init_lists_the_views_imports_as_what_they_name(shop):
    imports, _ = handler_imports((shop / VIEW).read_text(), path=VIEW, root=shop)
    assert "from orders.models import Fulfillment" in imports
    assert "from django.db import transaction" in imports
    assert "from django.conf import settings" in imports
    assert "import stripe" in imports


def test_the_fix_passes_with_the_allowlist_init_wrote(shop):
    result = judge(shop, fix_diff(shop))
    assert result.allowed, result.reasons
    assert result.files == [VIEW]


def test_a_relative_import_resolves_against_the_views_own_package(shop):
    # Not listed: refused, naming what it resolves to and the entry that would allow it.
    result = judge(
        shop,
        edit(
            shop,
            "from .models import Fulfillment\n",
            "from .models import Fulfillment\nfrom .apps import OrdersConfig\n",
        ),
    )
    assert not result.allowed
    assert any(
        "from .apps (orders.apps) import OrdersConfig is not among the imports" in r
        and "'from orders.apps import OrdersConfig'" in r
        for r in result.reasons
    ), result.reasons
    # Listed by what it names: allowed, written relative as the project writes it.
    result = judge(
        shop,
        edit(
            shop,
            "from .models import Fulfillment\n",
            "from .apps import OrdersConfig\nfrom .models import Fulfillment\n\nAPP = OrdersConfig.name\n",
        ),
        "from orders.apps import OrdersConfig",
    )
    assert result.allowed, result.reasons


@pytest.mark.parametrize(
    ("old", "new", "rule", "why"),
    [
        (
            "    with transaction.atomic():\n",
            "    connection.connection.cursor()\n    with transaction.atomic():\n",
            "driver-attribute",
            ".connection leads beneath the ORM",
        ),
        (
            "    with transaction.atomic():\n",
            "    transaction.get_connection().connection.execute('SELECT 1')\n    with transaction.atomic():\n",
            "driver-attribute",
            ".connection leads beneath the ORM",
        ),
        (
            "    with transaction.atomic():\n",
            "    with connection.schema_editor() as editor:\n        editor.delete_model(Fulfillment)\n"
            "    with transaction.atomic():\n",
            "driver-attribute",
            ".schema_editor",
        ),
        (
            "    with transaction.atomic():\n",
            "    with connection.cursor() as cursor:\n        cursor.execute('DROP TABLE orders_fulfillment')\n"
            "    with transaction.atomic():\n",
            "raw-sql",
            "changes the schema",
        ),
        (
            "    with transaction.atomic():\n",
            "    list(Fulfillment.objects.raw(f\"SELECT * FROM orders_fulfillment WHERE order_id = '{order_id}'\"))\n"
            "    with transaction.atomic():\n",
            "dynamic-sql",
            "raw() is given SQL built at run time",
        ),
    ],
    ids=[
        "raw-connection",
        "connection-of-the-transaction",
        "schema-editor",
        "drop-table",
        "raw-f-string",
    ],
)
def test_what_a_django_patch_may_not_reach_is_refused(shop, old, new, rule, why):
    extra = "from django.db import connection, connections"
    result = judge(shop, edit(shop, old, new), extra)
    assert not result.allowed
    assert any(f"capability rule {rule!r}" in r and why in r for r in result.reasons), result.reasons


def in_a_fresh_lab(cwd: Path, script: str, *args: str) -> Any:
    """What `script` prints (JSON), run with `args` by this interpreter in a process of its own."""
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


PROBE = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path

    imported = []
    sys.addaudithook(lambda event, args: imported.append(args[0]) if event == "import" else None)

    from acklab.flows import guard
    from acklab.flows.spec import load_spec

    repo, spec, commit, first, second = sys.argv[1:]
    decisions = []
    for diff in (first, second, first):
        result = guard.check(Path(diff).read_text(), spec=load_spec(Path(spec)), repo=Path(repo), commit=commit)
        decisions.append([result.allowed, result.reasons])
    loaded = sorted(
        name for name, module in sys.modules.items()
        if str(getattr(module, "__file__", "") or "").startswith(repo)
    )
    print(json.dumps({"decisions": decisions, "imported": imported, "loaded_from_repo": loaded}))
    """
)


def test_the_guard_decides_without_any_of_the_shop_or_django_entering_the_lab(shop, tmp_path):
    import yaml

    spec_file = tmp_path / "repair.flow.yaml"
    spec_file.write_text(yaml.safe_dump(flow_doc(shop)))
    good, bad = tmp_path / "fix.diff", tmp_path / "raw.diff"
    good.write_text(fix_diff(shop))
    bad.write_text(
        edit(
            shop,
            "    with transaction.atomic():\n",
            "    settings.DATABASES.clear()\n    connection = transaction.get_connection().connection\n    with transaction.atomic():\n",
        )
    )
    probe = in_a_fresh_lab(
        tmp_path,
        PROBE,
        str(shop.resolve()),
        str(spec_file),
        git(shop, "rev-parse", "HEAD"),
        str(good),
        str(bad),
    )
    (fixed, fixed_reasons), (raw, raw_reasons), again = probe["decisions"]
    assert fixed, fixed_reasons
    assert not raw
    assert any("capability rule 'driver-attribute'" in r for r in raw_reasons)
    assert again == [fixed, fixed_reasons]
    # Not one import of the shop, of Django or of Stripe happened in the lab's process: no settings
    # were read, no app was loaded, nothing needed DJANGO_SETTINGS_MODULE.
    foreign = sorted({name for name in probe["imported"] if name.split(".")[0] in FOREIGN})
    assert foreign == []
    assert probe["loaded_from_repo"] == []
    assert "acklab.flows.guard" in probe["imported"]  # the hook saw the lab's own imports


DETERMINISM = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from acklab.flows.capabilities import check

    root, path, source, *imports = sys.argv[1:]
    first = check(Path(source).read_text(), path=path, imports=imports, root=Path(root))
    import django.db.transaction, json.decoder  # what another part of the lab might have imported
    second = check(Path(source).read_text(), path=path, imports=imports, root=Path(root))
    print(json.dumps([first, second]))
    """
)


def test_a_decision_does_not_depend_on_what_the_lab_imported_before(shop, tmp_path):
    source = tmp_path / "views.py"
    source.write_text(FIXED_VIEW.replace("import stripe\n", "import stripe\nfrom json import decoder\n", 1))
    imports, _ = handler_imports(FIXED_VIEW, path=VIEW, root=shop)
    first, second = in_a_fresh_lab(
        tmp_path, DETERMINISM, str(shop), VIEW, str(source), *imports, "from json import decoder"
    )
    assert first == second == []  # submodules the spec names are allowed, whether loaded or not
