"""Scripted stand-ins for the seeds' models, so their scripts run offline and deterministically.

Run a seed script with `HITL_DEFAULT_MODEL=scripted:seeds.weather` to answer its agents with the
script below instead of OpenAI. It is not a language model: it reads city names and calls the
agent's temperature tool, then repeats the tool outputs.
"""

from __future__ import annotations

import re

from hitl import ModelReply, ModelRequest, ScriptedModel


def weather(req: ModelRequest) -> ModelReply:
    """Call `get_temperature` for each capitalized city after 'in', then report."""
    results = req.results_for("get_temperature")
    if results:
        return ModelReply.say(" ".join(r.output or "" for r in results))
    cities = re.findall(r"\bin ([A-Z][a-zA-Z ]+?)(?:\?|,| and |$)", req.last_user_text())
    if not cities or "get_temperature" not in req.tool_names():
        return ModelReply.say("I can only tell temperatures.")
    return ModelReply.calls(*(("get_temperature", {"city": c.strip()}) for c in cities))


ScriptedModel(weather, "seeds.weather")
