"""Agents the hostile suite attacks (importable by worker subprocesses too).

Every tool records its effect in the ledger named by `HITL_TEST_LEDGER`, so a test can prove
that nothing ran without a decision.
"""

from __future__ import annotations

from hitl import Agent, ModelReply, ModelRequest, ScriptedModel, ToolContext, function_tool
from tests.helpers import record_effect


@function_tool(needs_approval=True)
def wire(ctx: ToolContext[object], amount: int) -> str:
    """Wire money to the customer.

    Args:
        amount: Dollars to wire.
    """
    record_effect(ctx, "wire")
    return f"wired ${amount}"


def gate_script(req: ModelRequest) -> ModelReply:
    """Wire once, then report what happened."""
    done = req.results_for("wire")
    if done:
        return ModelReply.say(done[-1].output or "")
    return ModelReply.call("wire", {"amount": 250})


gate = Agent(
    name="Gate desk",
    instructions="Wire money when asked.",
    tools=[wire],
    model=ScriptedModel(gate_script, "tests.hostile.gate"),
)


# Two agents whose tools share a name: an intern's desk (anyone may approve) and a CFO's desk
# (only the CFO). An `always` rule granted on the first must not reach the second.


@function_tool(name_override="wire", needs_approval=True, approvers=["cfo"])
def cfo_wire(ctx: ToolContext[object], amount: int) -> str:
    """Wire a large amount (CFO only).

    Args:
        amount: Dollars to wire.
    """
    record_effect(ctx, "cfo_wire")
    return f"CFO wired ${amount}"


def cfo_script(req: ModelRequest) -> ModelReply:
    done = [r for r in req.results_for("wire") if r.output and r.output.startswith("CFO")]
    if done:
        return ModelReply.say(done[-1].output or "")
    return ModelReply.call("wire", {"amount": 90000})


def intern_script(req: ModelRequest) -> ModelReply:
    if not req.results_for("wire"):
        return ModelReply.call("wire", {"amount": 10})
    return ModelReply.call("transfer_to_cfo_desk")


cfo_desk = Agent(
    name="CFO desk",
    handoff_description="Large wires",
    tools=[cfo_wire],
    model=ScriptedModel(cfo_script, "tests.hostile.cfo"),
)
intern_desk = Agent(
    name="Intern desk",
    tools=[wire],
    handoffs=[cfo_desk],
    model=ScriptedModel(intern_script, "tests.hostile.intern"),
)


@function_tool(needs_approval=True, approval_timeout=4)
def wire_soon(ctx: ToolContext[object], amount: int) -> str:
    """Wire money; the approval expires after 4 seconds.

    Args:
        amount: Dollars to wire.
    """
    record_effect(ctx, "wire_soon")
    return f"wired ${amount}"


def soon_script(req: ModelRequest) -> ModelReply:
    done = req.results_for("wire_soon")
    if done:
        return ModelReply.say(done[-1].output or "")
    return ModelReply.call("wire_soon", {"amount": 250})


deadline_desk = Agent(
    name="Deadline desk",
    tools=[wire_soon],
    model=ScriptedModel(soon_script, "tests.hostile.soon"),
)

AGENTS = [gate, intern_desk, deadline_desk]
