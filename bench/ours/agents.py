"""The benchmark's agents, served by `python -m hitl.worker --agents bench.ours.agents:agents`.

The job (the same on the peer's side, `bench/peer/workflow.py`): a scripted model asks for one
refund, the refund tool needs approval, after the decision the tool runs (an activity) and the
model gives one final answer. The long run calls a tool without approval that returns 5 KB, N
times, then answers.

`agent_openai` is the headline: the real model path, `OpenAIModel` (the Responses API through the
real `openai` client, a regular activity) pointed by `OPENAI_BASE_URL` at `bench.wire`, which
answers at once with the same script. `agent` runs the script as `ScriptedModel`'s default (a
local activity); `agent_regular` runs it as a regular activity. `agent_openai_local_tool` is the
headline's job with the refund tool as a local activity (`function_tool(local_activity=True)`,
opt-in), which runs an approved call inside the decision's workflow task.
"""

from __future__ import annotations

import re

from bench.proto import chunk_text
from hitl import Agent, ModelReply, ModelRequest, OpenAIModel, ScriptedModel, function_tool

PROMPT = "Refund order 1001"


@function_tool(needs_approval=True)
async def refund(order_id: int) -> str:
    """Refund an order.

    Args:
        order_id: The order to refund.
    """
    return f"Refunded order {order_id}"


@function_tool(needs_approval=True, local_activity=True, name_override="refund")
async def refund_here(order_id: int) -> str:
    """Refund an order.

    Args:
        order_id: The order to refund.
    """
    return f"Refunded order {order_id}"


@function_tool
async def fetch_chunk(index: int) -> str:
    """Fetch one 5 KB chunk of a long document.

    Args:
        index: The chunk number.
    """
    return chunk_text(index)


def refund_script(req: ModelRequest) -> ModelReply:
    """Ask for the refund named in the request; answer once the tool has run."""
    done = req.results_for("refund")
    if done:
        return ModelReply.say(f"Done: {done[-1].output}")
    order = re.search(r"\d+", req.last_user_text())
    return ModelReply.call("refund", {"order_id": int(order.group()) if order else 0})


def long_script(req: ModelRequest) -> ModelReply:
    """Call `fetch_chunk` N times (`turns=N` in the request), then answer."""
    wanted = int(re.search(r"turns=(\d+)", req.last_user_text()).group(1))  # type: ignore[union-attr]
    got = len(req.results_for("fetch_chunk"))
    if got >= wanted:
        return ModelReply.say(f"Read {got} chunks.")
    return ModelReply.call("fetch_chunk", {"index": got})


INSTRUCTIONS = "Refund orders when asked."

agent = Agent(
    name="Bench desk",
    instructions=INSTRUCTIONS,
    tools=[refund],
    model=ScriptedModel(refund_script, "bench.refund"),
)
agent_regular = Agent(
    name="Bench desk (model activity)",
    instructions=INSTRUCTIONS,
    tools=[refund],
    model=ScriptedModel(refund_script, "bench.refund.regular", local_activity=False),
)
long_agent = Agent(
    name="Bench reader",
    instructions="Read every chunk.",
    tools=[fetch_chunk],
    model=ScriptedModel(long_script, "bench.long"),
)
long_agent_regular = Agent(
    name="Bench reader (model activity)",
    instructions="Read every chunk.",
    tools=[fetch_chunk],
    model=ScriptedModel(long_script, "bench.long.regular", local_activity=False),
)

# The real path: the model name is only recorded; `bench.wire` answers whatever it is called.
WIRE_MODEL = OpenAIModel("gpt-4.1-mini", api="responses")
agent_openai = Agent(
    name="Bench desk (OpenAI)", instructions=INSTRUCTIONS, tools=[refund], model=WIRE_MODEL
)
agent_openai_local_tool = Agent(
    name="Bench desk (OpenAI, local tool)",
    instructions=INSTRUCTIONS,
    tools=[refund_here],
    model=WIRE_MODEL,
)
long_agent_openai = Agent(
    name="Bench reader (OpenAI)",
    instructions="Read every chunk.",
    tools=[fetch_chunk],
    model=WIRE_MODEL,
)

agents = [
    agent,
    agent_regular,
    agent_openai,
    agent_openai_local_tool,
    long_agent,
    long_agent_regular,
    long_agent_openai,
]
BY_KEY = {
    "openai": agent_openai,
    "openai-local-tool": agent_openai_local_tool,
    "long-openai": long_agent_openai,
    "local": agent,
    "regular": agent_regular,
    "long-local": long_agent,
    "long-regular": long_agent_regular,
}
