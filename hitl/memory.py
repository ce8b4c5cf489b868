"""Client-managed sessions: the OpenAI Agents SDK's `Session` protocol and `SQLiteSession`.

A client-managed session lives in the process that runs `Runner.run(..., session=...)`, never
in a worker: the run reads the conversation so far before it starts (it becomes the run's
input) and writes its turn back when a client reads the completed result, including a run
that parked and was resumed days later from a `RunState` in another process (see
`hitl.session.ClientTurn` and docs/approvals.md). `SQLiteSession` keeps the SDK's tables, so a
database file written by the SDK reads here and the other way round.
"""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import sqlite3


@dataclass
class SessionSettings:
    """Settings of a session (the SDK's `SessionSettings`).

    Attributes:
        limit: Items `get_items()` returns when it is given no limit (`None`: all).
    """

    limit: int | None = None


@runtime_checkable
class Session(Protocol):
    """What `Runner.run(..., session=...)` accepts besides a `TemporalSession` or an id.

    Any object with these four coroutine methods (and a `session_id`) works, as in the SDK.
    """

    session_id: str

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The conversation so far (the latest `limit` items, oldest first)."""
        ...

    async def add_items(self, items: list[Any]) -> None:
        """Append items."""
        ...

    async def pop_item(self) -> Any | None:
        """Remove and return the latest item (`None` when empty)."""
        ...

    async def clear_session(self) -> None:
        """Forget the conversation."""
        ...


def _settings(value: SessionSettings | dict[str, Any] | None) -> SessionSettings:
    if value is None:
        return SessionSettings()
    if isinstance(value, dict):
        return SessionSettings(**value)
    return value


class SQLiteSession:
    """A conversation stored in SQLite (the SDK's `SQLiteSession`, same tables).

    In memory by default (gone with the process); give `db_path` to keep it. Each operation
    runs in a thread, one at a time per session.
    """

    def __init__(
        self,
        session_id: str,
        db_path: str | Path = ":memory:",
        sessions_table: str = "agent_sessions",
        messages_table: str = "agent_messages",
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ) -> None:
        """Open (and create, if needed) the session's tables.

        Args:
            session_id: The conversation's id.
            db_path: The database file (default: an in-memory database).
            sessions_table: Table of sessions.
            messages_table: Table of items.
            session_settings: Defaults such as `limit` for `get_items()`.
        """
        import sqlite3

        self.session_id = session_id
        self.db_path = db_path
        self.sessions_table = sessions_table
        self.messages_table = messages_table
        self.session_settings = _settings(session_settings)
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection = sqlite3.connect(str(db_path), check_same_thread=False)
        with self._lock:
            self._conn.execute(
                f"CREATE TABLE IF NOT EXISTS {sessions_table} (session_id TEXT PRIMARY KEY, "
                "created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP, "
                "updated_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP)"
            )
            self._conn.execute(
                f"CREATE TABLE IF NOT EXISTS {messages_table} (id INTEGER PRIMARY KEY "
                "AUTOINCREMENT, session_id TEXT NOT NULL, message_data TEXT NOT NULL, "
                "created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP, FOREIGN KEY (session_id) "
                f"REFERENCES {sessions_table} (session_id) ON DELETE CASCADE)"
            )
            self._conn.execute(
                f"CREATE INDEX IF NOT EXISTS idx_{messages_table}_session_id "
                f"ON {messages_table} (session_id, id)"
            )
            self._conn.commit()

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The conversation so far, oldest first.

        Only the latest `limit` items (default: the settings' limit); rows that are not JSON
        are skipped.
        """
        limit = limit if limit is not None else self.session_settings.limit

        def read() -> list[Any]:
            with self._lock:
                if limit is None:
                    rows = self._conn.execute(
                        f"SELECT message_data FROM {self.messages_table} WHERE session_id = ? "
                        "ORDER BY id ASC",
                        (self.session_id,),
                    ).fetchall()
                else:
                    rows = self._conn.execute(
                        f"SELECT message_data FROM {self.messages_table} WHERE session_id = ? "
                        "ORDER BY id DESC LIMIT ?",
                        (self.session_id, limit),
                    ).fetchall()[::-1]
            return [item for (data,) in rows if (item := _loads(data)) is not None]

        return await asyncio.to_thread(read)

    async def add_items(self, items: list[Any]) -> None:
        """Append items (in one transaction)."""
        if not items:
            return

        def write() -> None:
            with self._lock, self._conn:
                self._conn.execute(
                    f"INSERT OR IGNORE INTO {self.sessions_table} (session_id) VALUES (?)",
                    (self.session_id,),
                )
                self._conn.executemany(
                    f"INSERT INTO {self.messages_table} (session_id, message_data) VALUES (?, ?)",
                    [(self.session_id, json.dumps(item)) for item in items],
                )
                self._conn.execute(
                    f"UPDATE {self.sessions_table} SET updated_at = CURRENT_TIMESTAMP "
                    "WHERE session_id = ?",
                    (self.session_id,),
                )

        await asyncio.to_thread(write)

    async def pop_item(self) -> Any | None:
        """Remove and return the latest item (`None` when the session is empty)."""

        def pop() -> Any | None:
            with self._lock, self._conn:
                while True:
                    row = self._conn.execute(
                        f"DELETE FROM {self.messages_table} WHERE id = (SELECT id FROM "
                        f"{self.messages_table} WHERE session_id = ? ORDER BY id DESC LIMIT 1) "
                        "RETURNING message_data",
                        (self.session_id,),
                    ).fetchone()
                    if row is None:
                        return None
                    item = _loads(row[0])
                    if item is not None:
                        return item

        return await asyncio.to_thread(pop)

    async def clear_session(self) -> None:
        """Forget the conversation."""

        def clear() -> None:
            with self._lock, self._conn:
                self._conn.execute(
                    f"DELETE FROM {self.messages_table} WHERE session_id = ?", (self.session_id,)
                )
                self._conn.execute(
                    f"DELETE FROM {self.sessions_table} WHERE session_id = ?", (self.session_id,)
                )

        await asyncio.to_thread(clear)

    def close(self) -> None:
        """Close the database connection."""
        with self._lock:
            self._conn.close()


def _loads(data: Any) -> Any | None:
    try:
        return json.loads(data)
    except (TypeError, ValueError):
        return None
