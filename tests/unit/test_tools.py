from __future__ import annotations

import asyncio

import pytest
from pydantic import BaseModel

from hitl import RunContextWrapper, ToolContext, UserError, function_tool
from hitl.tools import ToolArgumentsError, tool_output_text


@function_tool
def refund(ctx: ToolContext[object], order_id: int, amount: float, reason: str = "n/a") -> str:
    """Refund an order.

    Longer explanation that the model also sees.

    Args:
        order_id: The order to refund.
        amount: Amount in dollars,
            possibly with cents.
        reason: Why.

    Returns:
        A receipt.
    """
    return f"{ctx.idempotency_key}:{order_id}:{amount}:{reason}"


def test_schema_from_signature_and_docstring() -> None:
    assert refund.name == "refund"
    assert refund.description == "Refund an order.\n\nLonger explanation that the model also sees."
    schema = refund.params_json_schema
    assert list(schema["properties"]) == ["order_id", "amount", "reason"], "ctx is not a param"
    assert (
        schema["properties"]["amount"]["description"] == "Amount in dollars, possibly with cents."
    )
    assert schema["properties"]["order_id"]["type"] == "integer"
    # Strict mode: no extras, every property required.
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["order_id", "amount", "reason"]
    assert refund.approval_mode == "never"


def test_sphinx_docstrings_and_overrides() -> None:
    @function_tool(name_override="ship", description_override="Ship it.", strict_mode=False)
    def send(item: str, express: bool = False) -> str:
        """Send something.

        :param item: What to send.
        :param express: Faster.
        """
        return item

    assert (send.name, send.description) == ("ship", "Ship it.")
    assert send.params_json_schema["properties"]["item"]["description"] == "What to send."
    assert send.params_json_schema["required"] == ["item"], "non-strict keeps defaults optional"


def test_parse_arguments_reports_every_problem() -> None:
    assert refund.parse_arguments('{"order_id": 1, "amount": 2.5, "reason": "x"}') == {
        "order_id": 1,
        "amount": 2.5,
        "reason": "x",
    }
    with pytest.raises(ToolArgumentsError, match="not valid JSON"):
        refund.parse_arguments('{"order_id": ')
    with pytest.raises(ToolArgumentsError, match="must be a JSON object"):
        refund.parse_arguments("[1, 2]")
    with pytest.raises(ToolArgumentsError) as err:
        refund.parse_arguments('{"order_id": "x", "bogus": 1}')
    message = str(err.value)
    assert "order_id: Input should be a valid integer" in message
    assert "amount: Field required" in message
    assert "bogus: Extra inputs are not permitted" in message


def test_invoke_sync_and_async_with_context() -> None:
    ctx = ToolContext(context=None, idempotency_key="wf:call")
    out = asyncio.run(refund.invoke(ctx, '{"order_id": 7, "amount": 1, "reason": "r"}'))
    assert out == "wf:call:7:1.0:r"

    @function_tool
    async def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    assert asyncio.run(add.invoke(ctx, '{"a": 2, "b": 3}')) == 5


def test_predicates_sync_and_async() -> None:
    seen: list[tuple[object, str]] = []

    def sync_pred(ctx: RunContextWrapper[object], params: dict[str, object], call_id: str) -> bool:
        seen.append((params["x"], call_id))
        return params["x"] == 1

    async def async_pred(ctx: object, params: dict[str, object], call_id: str) -> bool:
        return params["x"] == 2

    @function_tool(needs_approval=sync_pred)
    def t1(x: int) -> int:
        """T1."""
        return x

    @function_tool(needs_approval=async_pred)
    def t2(x: int) -> int:
        """T2."""
        return x

    ctx = RunContextWrapper(context=None)
    assert asyncio.run(t1.evaluate_needs_approval(ctx, {"x": 1}, "c1")) is True
    assert asyncio.run(t1.evaluate_needs_approval(ctx, {"x": 2}, "c2")) is False
    assert seen == [(1, "c1"), (2, "c2")]
    assert asyncio.run(t2.evaluate_needs_approval(ctx, {"x": 2}, "c3")) is True
    assert t1.approval_mode == t2.approval_mode == "predicate"
    assert t1.spec().approval == "predicate"


def test_misuse_is_a_user_error() -> None:
    with pytest.raises(UserError, match="needs_approval must be"):

        @function_tool(needs_approval="yes")  # type: ignore[arg-type]
        def bad(x: int) -> int:
            """Bad."""
            return x

    with pytest.raises(UserError, match=r"\*args"):

        @function_tool
        def varargs(*items: int) -> int:
            """Bad."""
            return 0

    with pytest.raises(UserError, match="context parameter must come first"):

        @function_tool
        def late(x: int, ctx: ToolContext[object]) -> int:
            """Bad."""
            return x


class Receipt(BaseModel):
    id: str


def test_output_rendering() -> None:
    assert tool_output_text("plain") == "plain"
    assert tool_output_text({"a": 1}) == '{"a": 1}'
    assert tool_output_text(Receipt(id="r1")) == '{"id":"r1"}'
    assert tool_output_text(None) == "null"


def test_a_tool_heartbeats_by_default_so_a_crash_costs_seconds() -> None:
    from hitl.tools import DEFAULT_HEARTBEAT_TIMEOUT

    assert refund.heartbeat_timeout == DEFAULT_HEARTBEAT_TIMEOUT <= 10
    assert refund.spec().heartbeat_timeout_seconds == DEFAULT_HEARTBEAT_TIMEOUT

    @function_tool(heartbeat_timeout=None)
    def quiet() -> str:
        """No heartbeat."""
        return ""

    assert quiet.spec().heartbeat_timeout_seconds is None


async def test_the_activity_beats_while_a_sync_tool_blocks() -> None:
    """A sync tool that never heartbeats itself still keeps its attempt alive."""
    import threading

    from temporalio.testing import ActivityEnvironment

    from hitl.activities.heartbeat import heartbeating

    beats = 0
    enough = threading.Event()

    def on_heartbeat(*_: object) -> None:
        nonlocal beats
        beats += 1
        if beats >= 3:
            enough.set()

    def blocking_tool() -> bool:  # blocks its thread until the beats were seen
        return enough.wait(timeout=30)

    async def attempt() -> bool:
        async with heartbeating(0.3):
            return await asyncio.to_thread(blocking_tool)

    env = ActivityEnvironment()
    env.on_heartbeat = on_heartbeat
    assert await env.run(attempt) is True
    assert beats >= 3


def test_required_approvals_is_checked_when_the_tool_is_defined() -> None:
    def body(amount: int) -> str:
        """Pay.

        Args:
            amount: Dollars.
        """
        return "paid"

    for bad, says in [
        (dict(required_approvals=2), "needs needs_approval"),
        (dict(required_approvals=lambda *a: 2), "needs needs_approval"),
        (dict(needs_approval=True, required_approvals=0), "from 1 to 10"),
        (dict(needs_approval=True, required_approvals=11), "from 1 to 10"),
        (dict(needs_approval=True, required_approvals=True), "an int or a callable"),
        (dict(needs_approval=True, called_on_rejection=True), "needs a UserAction parameter"),
    ]:
        with pytest.raises(UserError, match=says):
            function_tool(**bad)(body)  # type: ignore[call-overload]
    spec = function_tool(needs_approval=True, required_approvals=2)(body).spec()
    assert spec.required_approvals == 2
    spec = function_tool(needs_approval=True, required_approvals=lambda *a: 3)(body).spec()
    assert spec.required_approvals == 1, "a callable decides per call, in the plan"


async def test_a_counting_function_must_return_a_sensible_number() -> None:
    def body(amount: int) -> str:
        """Pay.

        Args:
            amount: Dollars.
        """
        return "paid"

    ctx = RunContextWrapper(context=None)
    for answer in (0, 11, "2", None, True):
        tool = function_tool(needs_approval=True, required_approvals=lambda *a, v=answer: v)(body)
        with pytest.raises(ValueError, match="must return an int from 1 to 10"):
            await tool.evaluate_required_approvals(ctx, {"amount": 1}, "c")
    tool = function_tool(needs_approval=True, required_approvals=lambda c, p, i: p["amount"])(body)
    assert await tool.evaluate_required_approvals(ctx, {"amount": 3}, "c") == 3
