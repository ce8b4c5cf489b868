"""A toy back office (orders, payments) in SQLite, shared by the examples' tools.

Every write takes an idempotency key: a retried tool call (Temporal activities run at least
once) returns the first receipt instead of paying twice.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

ORDERS = {
    1001: {"customer": "Ada Lovelace", "item": "Espresso machine", "total": 250.0},
    1002: {"customer": "Ada Lovelace", "item": "Milk frother", "total": 40.0},
    1003: {"customer": "Alan Turing", "item": "Kettle", "total": 35.0},
    1004: {"customer": "Grace Hopper", "item": "Standing desk", "total": 1250.0},
}


def db_path() -> Path:
    """Where the back office lives (`HITL_BACKOFFICE_DB`, default `.hitl/backoffice.sqlite`)."""
    return Path(os.environ.get("HITL_BACKOFFICE_DB", ".hitl/backoffice.sqlite"))


@contextlib.contextmanager
def connect() -> Iterator[sqlite3.Connection]:
    """Open the back-office database, creating it on first use."""
    path = db_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, timeout=10, isolation_level=None)
    try:
        db.execute(
            "CREATE TABLE IF NOT EXISTS operations (idempotency_key TEXT PRIMARY KEY, "
            "kind TEXT, order_id INTEGER, amount REAL, receipt TEXT)"
        )
        yield db
    finally:
        db.close()


def perform(idempotency_key: str, kind: str, order_id: int, amount: float = 0.0) -> str:
    """Do an operation once per key; a repeat returns the original receipt."""
    with connect() as db:
        row = db.execute(
            "SELECT receipt FROM operations WHERE idempotency_key = ?", (idempotency_key,)
        ).fetchone()
        if row:
            return str(row[0])
        count = db.execute("SELECT COUNT(*) FROM operations").fetchone()[0]
        receipt = f"{kind.upper()}-{order_id}-{count + 1:04d}"
        db.execute(
            "INSERT INTO operations VALUES (?, ?, ?, ?, ?)",
            (idempotency_key, kind, order_id, amount, receipt),
        )
        return receipt


def operations() -> list[tuple[str, str, int, float, str]]:
    """Every operation performed so far."""
    with connect() as db:
        return list(db.execute("SELECT * FROM operations ORDER BY rowid"))


COMPANY_DOMAIN = "example.com"
"""Mail to this domain stays inside the company (the email desk sends it without approval)."""


def send_mail(idempotency_key: str, to: str, subject: str, body: str) -> str:
    """Send an email once per key (a toy outbox); a repeat returns the first message id."""
    with connect() as db:
        db.execute(
            "CREATE TABLE IF NOT EXISTS outbox (idempotency_key TEXT PRIMARY KEY, "
            "recipient TEXT, subject TEXT, body TEXT, message_id TEXT)"
        )
        row = db.execute(
            "SELECT message_id FROM outbox WHERE idempotency_key = ?", (idempotency_key,)
        ).fetchone()
        if row:
            return str(row[0])
        count = db.execute("SELECT COUNT(*) FROM outbox").fetchone()[0]
        message_id = f"MSG-{count + 1:04d}"
        db.execute(
            "INSERT INTO outbox VALUES (?, ?, ?, ?, ?)",
            (idempotency_key, to, subject, body, message_id),
        )
        return message_id


def outbox() -> list[tuple[str, str, str, str, str]]:
    """Every email sent so far: (key, recipient, subject, body, message id)."""
    with connect() as db:
        db.execute(
            "CREATE TABLE IF NOT EXISTS outbox (idempotency_key TEXT PRIMARY KEY, "
            "recipient TEXT, subject TEXT, body TEXT, message_id TEXT)"
        )
        return list(db.execute("SELECT * FROM outbox ORDER BY rowid"))
