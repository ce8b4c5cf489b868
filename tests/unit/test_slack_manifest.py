"""The Slack app manifest in docs/console.md: it parses, and its interactivity URL is the route
the console serves for chat decisions (so an app made from it reaches the console)."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import yaml
from starlette.routing import Route

from hitl.console.acts import CHAT_SLACK
from hitl.console.app import create_app
from hitl.console.auth import Authenticator
from hitl.console.data import ConsoleData
from tests.helpers import ROOT


def manifest() -> dict[str, object]:
    page = (ROOT / "docs" / "console.md").read_text()
    section = page.split("A Slack app manifest", 1)[1]
    [block] = re.findall(r"```yaml\n(.*?)```", section, re.S)[:1]
    loaded = yaml.safe_load(block)
    assert isinstance(loaded, dict)
    return loaded


def test_the_documented_manifest_names_the_route_the_console_serves() -> None:
    m = manifest()
    interactivity = m["settings"]["interactivity"]  # type: ignore[index]
    assert interactivity["is_enabled"] is True
    url = urlsplit(interactivity["request_url"])
    assert url.scheme == "https" and url.path == CHAT_SLACK == "/chat/slack"
    app = create_app(ConsoleData({}), Authenticator(mode="link", user="ann"))
    served = [r for r in app.routes if isinstance(r, Route) and r.path == url.path]
    assert served and served[0].methods is not None and "POST" in served[0].methods


def test_the_documented_manifest_asks_only_for_what_the_gateway_uses() -> None:
    # Notes go out through the channel's incoming webhook; outcomes go back to the
    # response_url of each click: no bot token, so no chat:write.
    m = manifest()
    assert m["oauth_config"] == {"scopes": {"bot": ["incoming-webhook"]}}
    assert m["settings"]["socket_mode_enabled"] is False  # type: ignore[index]
    assert m["features"]["bot_user"]["display_name"]  # type: ignore[index]
