"""A conflicting-payload incident records the fields the conflicting body changed, and the
incident page shows them (the bodies themselves are kept only as hashes)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import acklab
from acklab.evidence.documents.incident import Incident
from acklab.evidence.loading import load_evidence_json

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


class DedupingApp:
    """A raw ASGI consumer: one effect per event id; a different body under a known id gets 409."""

    def __init__(self) -> None:
        self.bodies: dict[str, str] = {}

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        event_id = dict(scope["headers"]).get(b"webhook-id", b"").decode()
        digest = hashlib.sha256(body).hexdigest()
        status = 200
        if self.bodies.setdefault(event_id, digest) != digest:
            status = 409
        await send(
            {"type": "http.response.start", "status": status, "headers": [(b"content-type", b"text/plain")]}
        )
        await send({"type": "http.response.body", "body": b"ok"})

    def effects(self, event_id: str) -> int:
        return 1 if event_id in self.bodies else 0


def test_the_incident_names_the_changed_fields_and_the_page_shows_them(
    tmp_path: Path, client_for: Any
) -> None:
    app = DedupingApp()
    result = acklab.attack(
        app,
        endpoint="/hooks",
        secret=SECRET,
        effects=app.effects,
        experiments=["conflicting-payload"],
        trials=1,
        seed=7,
        out=tmp_path / "out",
        serving="in-process",
    )
    assert result.passed, result.explain()
    [incident_file] = (result.bundle / "incidents").glob("*.json")
    incident = Incident.read(load_evidence_json(incident_file), what=str(incident_file))
    [trial] = incident.trials
    assert trial.fault is not None
    [landed] = [t for t in trial.fault.tries if t.landed]
    assert landed.facts is not None
    # attack()'s default conflict, the one a spec without conflict: gets too: the amount changes
    assert landed.facts["conflict_fields"] == [
        {"path": "data.amount_cents", "original": 1200, "conflicting": 9900}
    ]
    assert SECRET not in incident_file.read_text()

    client = client_for(tmp_path / "out")
    bundle = result.bundle.name
    html = client.get(f"/bundles/{bundle}/incidents/{incident.incident_id}").text
    table = html.split("what the conflicting body changed", 1)[1].split("</table>", 1)[0]
    assert "<code>data.amount_cents</code>" in table
    assert f"<code>{json.dumps(1200)}</code>" in table
    assert "<code>9900</code>" in table
