"""The app factory: ``create_app(settings) -> FastAPI``.

The engine is built and the tables are created here, when an app is made, never at
import; the lifespan disposes the engine at shutdown.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from acklab.app.contract import OrderPaidEvent
from acklab.app.db import create_db_engine, prepare_database
from acklab.app.errors import ConfigError, Rejection
from acklab.app.routes import router
from acklab.app.runtime import Fixture, load_handler
from acklab.app.schemas import ErrorBody
from acklab.app.schemes import SCHEMES, Scheme
from acklab.app.settings import Settings

TITLE = "acklab webhook fixture"


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build a fixture app: open the database, create the tables, pick the handler.

    Raises ``ConfigError`` (bad setting, e.g. no secret) or ``DatabaseUnavailable``.
    """
    settings = settings or Settings()
    if settings.secret is None:
        raise ConfigError("no webhook secret: set ACKLAB_WEBHOOK_SECRET or Settings(secret=...)")
    handler = load_handler(settings.handler)
    engine = create_db_engine(settings.database_url)
    prepare_database(engine)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        engine.dispose()

    app = FastAPI(
        title=TITLE,
        version="1",
        description=(
            "A webhook consumer under test. Deliveries to /webhooks/orders are signed under the "
            f"'{settings.scheme}' scheme; /events/{{event_id}}/effects counts their side effects."
        ),
        lifespan=lifespan,
    )
    app.state.fixture = Fixture(settings=settings, engine=engine, handler=handler)
    app.include_router(router)
    app.add_exception_handler(Rejection, _rejection)
    for database_error in (OperationalError, InterfaceError, PoolTimeout):
        app.add_exception_handler(database_error, _database_unavailable)
    app.openapi = lambda: _openapi(app, SCHEMES[settings.scheme])  # type: ignore[method-assign]
    return app


async def _rejection(_: Request, exc: Exception) -> JSONResponse:
    if not isinstance(exc, Rejection):  # registered for Rejection only
        raise exc
    return JSONResponse(exc.body(), status_code=exc.status_code)


async def _database_unavailable(_: Request, exc: Exception) -> JSONResponse:
    # Never echo the driver's message: it may contain the URL, and with it a password.
    body = ErrorBody(
        error="database_unavailable", detail=f"the database did not answer ({type(exc).__name__})"
    )
    return JSONResponse(body.model_dump(), status_code=503, headers={"Retry-After": "1"})


def _openapi(app: FastAPI, scheme: Scheme) -> dict[str, Any]:
    """FastAPI's document, plus what the webhook route reads itself: its body and signature headers."""
    if app.openapi_schema is None:
        document = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes
        )
        components = document.setdefault("components", {})
        event_schema = OrderPaidEvent.model_json_schema(ref_template="#/components/schemas/{model}")
        components.setdefault("schemas", {}).update(event_schema.pop("$defs", {}))
        components["schemas"]["OrderPaidEvent"] = event_schema
        components["securitySchemes"] = {
            "webhookSignature": {
                "type": "apiKey",
                "in": "header",
                "name": scheme.signature_header,
                "description": f"The '{scheme.name}' webhook signature over the raw body.",
            }
        }
        operation = document["paths"]["/webhooks/orders"]["post"]
        operation["security"] = [{"webhookSignature": []}]
        operation["parameters"] = [
            {"name": name, "in": "header", "required": True, "schema": {"type": "string"}}
            for name in scheme.other_headers
        ]
        app.openapi_schema = document
    return app.openapi_schema
