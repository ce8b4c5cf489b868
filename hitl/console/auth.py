"""Who is deciding: the console's identities, sessions and CSRF tokens.

Three ways to know the person, one per deployment:

- `link` (the local default, like Jupyter's): the console prints a login link with a random
  token, good for one login; the person is the one the console was started for (`--user`, else
  the OS user). The sign-in page asks for a new link (after signing out, in a second browser),
  which the console prints where it runs, at the address it serves (never one a request names).
- `tokens` (small teams): a users file maps each name to the SHA-256 of a personal token
  (`hitl console-user NAME --users FILE` adds one and prints the token once); people log in
  with their name and token.
- `header` (behind an identity-aware proxy such as oauth2-proxy): the proxy authenticates
  people and sets a header (`X-Forwarded-User`, `X-Forwarded-Email`, ...) that the console
  trusts. Only for a console reachable through that proxy alone.

A session is a signed cookie (HMAC-SHA256 with a key held by the console process) carrying the
person, an expiry and a CSRF token; every form and htmx request must echo that token.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import urlencode

from hitl.errors import UserError

AuthMode = Literal["link", "tokens", "header"]
LINK_SECONDS = 5.0
"""`link` mode: at most one new sign-in link printed per this many seconds."""
COOKIE = "hitl_console"
SESSION_SECONDS = 12 * 3600
NAME = re.compile(r"^[A-Za-z0-9._@+-]{1,100}$")
"""What a person's name may be (it is written into decisions and audit rows)."""


@dataclass(frozen=True)
class Session:
    """A logged-in person."""

    person: str
    csrf: str
    expires: int


class Sessions:
    """Signed session cookies (stateless: a restart with a new key logs everyone out)."""

    def __init__(self, key: bytes | None = None, seconds: int = SESSION_SECONDS) -> None:
        self._key = key or secrets.token_bytes(32)
        self.seconds = seconds

    def issue(self, person: str) -> tuple[str, Session]:
        """A new session for `person`: the cookie value and the session."""
        session = Session(person, secrets.token_urlsafe(24), int(time.time()) + self.seconds)
        body = json.dumps([session.person, session.csrf, session.expires]).encode()
        data = base64.urlsafe_b64encode(body).decode()
        return f"{data}.{self._sign(data)}", session

    def read(self, cookie: str | None) -> Session | None:
        """The session a cookie carries, if it is ours, intact and current."""
        if not cookie or len(cookie) > 2000 or "." not in cookie:
            return None
        data, mac = cookie.rsplit(".", 1)
        if not hmac.compare_digest(mac, self._sign(data)):
            return None
        try:
            person, csrf, expires = json.loads(base64.urlsafe_b64decode(data))
        except (ValueError, TypeError):
            return None
        if not isinstance(expires, int) or expires < time.time() or not NAME.match(str(person)):
            return None
        return Session(str(person), str(csrf), expires)

    def ticket(self, person: str, *parts: str) -> str:
        """A token saying this console showed `parts` (a call, as seen) to `person`.

        A call's page carries one in its forms; a post is taken only with a ticket for the
        same person and the same fields, so a form cannot be pointed at another call, and a
        call a person was never shown cannot be decided through the console (see `check`).
        """
        expires = int(time.time()) + self.seconds
        return f"{expires}.{self._ticket_mac(person, parts, expires)}"

    def check(self, ticket: str, person: str, *parts: str) -> bool:
        """Whether `ticket` is this console's, current, for `person` and exactly `parts`."""
        stamp, _, mac = ticket.partition(".")
        if len(ticket) > 200 or not stamp.isdigit() or int(stamp) < time.time():
            return False
        return hmac.compare_digest(mac, self._ticket_mac(person, parts, int(stamp)))

    def _ticket_mac(self, person: str, parts: tuple[str, ...], expires: int) -> str:
        # A JSON array starting with "ticket": never the base64 text a cookie's MAC covers.
        return self._sign(json.dumps(["ticket", person, *parts, expires]))

    def _sign(self, data: str) -> str:
        return hmac.new(self._key, data.encode(), hashlib.sha256).hexdigest()


def token_digest(token: str) -> str:
    """How a users file stores a token."""
    return hashlib.sha256(token.encode()).hexdigest()


def load_users(path: str | Path) -> dict[str, str]:
    """Name -> token digest, from a users file `{"ann": {"token_sha256": "..."}}`."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read the console's users file {path}: {exc}") from None
    users: dict[str, str] = {}
    if not isinstance(data, dict):
        raise UserError(f"the users file {path} is not an object of users")
    for name, entry in data.items():
        digest = entry.get("token_sha256") if isinstance(entry, dict) else None
        if not NAME.match(str(name)) or not isinstance(digest, str) or len(digest) != 64:
            raise UserError(f"the users file {path}: entry {str(name)[:100]!r} is malformed")
        users[name] = digest
    return users


def add_user(path: str | Path, name: str) -> str:
    """Add (or give a new token to) `name` in the users file; the token, shown only now."""
    if not NAME.match(name):
        raise UserError(f"{name[:100]!r} is not a usable name (letters, digits, ._@+-)")
    file = Path(path)
    data = json.loads(file.read_text(encoding="utf-8")) if file.exists() else {}
    token = secrets.token_urlsafe(24)
    data[name] = {"token_sha256": token_digest(token)}
    file.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.chmod(file, 0o600)
    return token


@dataclass
class Authenticator:
    """How this console knows people (see the module docstring)."""

    mode: AuthMode = "link"
    user: str = ""
    """`link`: the person the console was started for."""
    users: dict[str, str] = field(default_factory=dict)
    """`tokens`: name -> token digest."""
    header: str = "X-Forwarded-User"
    """`header`: the header the proxy sets."""
    sessions: Sessions = field(default_factory=Sessions)
    link_token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    _link_used: bool = False
    base_url: str = ""
    """`link` mode: the address the console serves (new links point there, nowhere else)."""
    announce: Callable[[str], None] = field(default=lambda line: print(line, flush=True))
    """`link` mode: where a new sign-in link is printed (the console's own output)."""
    _last_link: float = float("-inf")

    def login_link(self, base_url: str, next_path: str = "") -> str:
        """`link` mode: the one-time login URL (then on to `next_path` of the console)."""
        link = f"{base_url.rstrip('/')}/login?token={self.link_token}"
        return link + (f"&{urlencode({'next': next_path})}" if next_path else "")

    def new_link(self, next_path: str = "") -> bool:
        """`link` mode: print a new one-time link, at this console's own address.

        The old link stops working. `False` when one was printed less than `LINK_SECONDS` ago,
        or this console has no address yet.
        """
        now = time.monotonic()
        if self.mode != "link" or not self.base_url or now - self._last_link < LINK_SECONDS:
            return False
        self._last_link = now
        self.link_token, self._link_used = secrets.token_urlsafe(24), False
        self.announce(f"sign in (once) as {self.user}: {self.login_link(self.base_url, next_path)}")
        return True

    def redeem_link(self, token: str) -> str | None:
        """`link` mode: the person, the first time the right token comes back."""
        if self.mode != "link" or self._link_used:
            return None
        if not hmac.compare_digest(token.encode(), self.link_token.encode()):
            return None
        self._link_used = True
        return self.user

    def check_token(self, name: str, token: str) -> str | None:
        """`tokens` mode: the person, when `token` is theirs."""
        digest = self.users.get(name)
        if self.mode != "tokens" or digest is None:
            return None
        return name if hmac.compare_digest(digest, token_digest(token)) else None

    def from_header(self, value: str | None) -> str | None:
        """`header` mode: the person the proxy vouches for."""
        if self.mode != "header" or not value:
            return None
        value = value.strip()
        return value if NAME.match(value) else None
