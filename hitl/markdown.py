"""Text for the Temporal UI, which renders a run's summary and current details as markdown.

Whatever a model, a tool or a caller wrote is shown literally: `$250.00 of the $250.00` is not
math, `*` is not emphasis, `<b>` is not HTML, `[x](y)` is not a link. Pure functions (workflow
code uses them).
"""

from __future__ import annotations

import re

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]<>|$~])")
_MD_LINE_START = re.compile(r"^(\s*)([#>+-]|\d+[.)])", re.MULTILINE)


def md_text(text: str) -> str:
    """Text the UI's markdown renders literally, its lines kept."""
    escaped = _MD_LINE_START.sub(r"\1\\\2", _MD_SPECIAL.sub(r"\\\1", text))
    return escaped.replace("\n", "  \n")


def fence(text: str, lang: str = "") -> list[str]:
    """`text` in a code block that its own backticks cannot close."""
    ticks = "`" * max(3, max((len(m) for m in re.findall(r"`+", text)), default=0) + 1)
    return [f"{ticks}{lang}", text, ticks]
