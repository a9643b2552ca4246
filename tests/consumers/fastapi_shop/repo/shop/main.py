"""The shop's FastAPI app: ``uvicorn shop.main:app``; Shopify's webhooks at ``/webhooks/shopify``."""

import base64
import hashlib
import hmac
import json
import os
from contextlib import asynccontextmanager

from fastapi import FastAPI, HTTPException, Request
from starlette.concurrency import run_in_threadpool

from .db import create_tables
from .hooks import order_paid


@asynccontextmanager
async def lifespan(app: FastAPI):
    create_tables()
    yield


app = FastAPI(lifespan=lifespan)


def verified(body: bytes, signature: str) -> bool:
    digest = hmac.new(os.environ["SHOPIFY_WEBHOOK_SECRET"].encode(), body, hashlib.sha256).digest()
    return hmac.compare_digest(base64.b64encode(digest).decode(), signature)


@app.post("/webhooks/shopify")
async def shopify(request: Request):
    body = await request.body()
    if not verified(body, request.headers.get("x-shopify-hmac-sha256", "")):
        raise HTTPException(401, "bad signature")
    if request.headers.get("x-shopify-topic") == "orders/paid":
        await run_in_threadpool(order_paid, json.loads(body))  # the database and the warehouse block
    return {"ok": True}


@app.get("/health")
def health():
    return {"ok": True}
