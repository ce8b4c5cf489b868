"""A small, safe markdown for approval messages: what a developer writes reads as intended.

A request's message is the tool developer's text, often with the model's words in it. It is
rendered with a deliberately small subset: paragraphs and line breaks, `-`/`*`/`1.` lists,
`#` headings (as bold lines), fenced and inline code, `**bold**` and `*emphasis*`, and links.
Everything is HTML-escaped first, so no tag or attribute of the text survives; the only
markup is what this module writes. A link goes only to `http(s)` addresses, opens in a new
tab without a referrer, and shows its destination's host beside its text, so a model's
`[Approve here](https://evil.example)` cannot pass for part of the console. `$`, `_`, `~`,
tables and raw HTML stay literal.
"""

from __future__ import annotations

import re
from html import escape
from urllib.parse import urlparse

from markupsafe import Markup

__all__ = ["render"]

_FENCE = re.compile(r"^```[^\n`]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)
_CODE = re.compile(r"`([^`\n]+)`")
_BOLD = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*")
_EM = re.compile(r"(?<![\w*])\*(?=[^\s*])(.+?)(?<=[^\s*])\*(?![\w*])")
_LINK = re.compile(r"\[([^\]\n]+)\]\(([^)\s]+)\)")
_ITEM = re.compile(r"^\s*(?:[-*]|\d+[.)])\s+")
_HEADING = re.compile(r"^#{1,6}\s+")
MAX_CHARS = 20_000
"""Longer messages are shown as plain text (escaped, line breaks kept)."""


def render(text: str) -> Markup:
    """`text` as safe HTML (the subset above)."""
    if len(text) > MAX_CHARS:
        return Markup('<p class="plain">') + escape(text) + Markup("</p>")
    out: list[str] = []
    pos = 0
    for fence in _FENCE.finditer(text):
        out.append(_blocks(text[pos : fence.start()]))
        out.append(f"<pre><code>{escape(fence.group(1).rstrip(chr(10)))}</code></pre>")
        pos = fence.end()
    out.append(_blocks(text[pos:]))
    return Markup("".join(out))


def _blocks(text: str) -> str:
    """Paragraphs, lists and headings of text with no fenced code."""
    html = []
    for block in re.split(r"\n[ \t]*\n", text.strip("\n")):
        lines = block.split("\n")
        if not block.strip():
            continue
        if all(_ITEM.match(line) for line in lines):
            tag = "ol" if re.match(r"^\s*\d", lines[0]) else "ul"
            items = "".join(f"<li>{_inline(_ITEM.sub('', line))}</li>" for line in lines)
            html.append(f"<{tag}>{items}</{tag}>")
        elif len(lines) == 1 and _HEADING.match(lines[0]):
            html.append(f"<p><strong>{_inline(_HEADING.sub('', lines[0]))}</strong></p>")
        else:
            html.append("<p>" + "<br>".join(_inline(line) for line in lines) + "</p>")
    return "".join(html)


def _inline(line: str) -> str:
    """One line: code spans kept literal, then links, bold and emphasis, all escaped."""
    parts = _CODE.split(line)  # odd parts are code
    out = []
    for i, part in enumerate(parts):
        if i % 2:
            out.append(f"<code>{escape(part)}</code>")
            continue
        out.append(_links(part))
    return "".join(out)


def _links(text: str) -> str:
    out, pos = [], 0
    for m in _LINK.finditer(text):
        out.append(_emphasis(escape(text[pos : m.start()])))
        out.append(_link(m.group(1), m.group(2)))
        pos = m.end()
    out.append(_emphasis(escape(text[pos:])))
    return "".join(out)


def _link(label: str, url: str) -> str:
    """A link to an `http(s)` address, its host shown; anything else as the text it was."""
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        return escape(f"[{label}]({url})")
    host = escape(parsed.hostname)
    return (
        f'<a href="{escape(url, quote=True)}" rel="noopener noreferrer nofollow" '
        f'target="_blank">{_emphasis(escape(label))}</a> <span class="host">({host})</span>'
    )


def _emphasis(escaped: str) -> str:
    return _EM.sub(r"<em>\1</em>", _BOLD.sub(r"<strong>\1</strong>", escaped))
