"""Calling the code users hand us: tools, predicates, approvers, filters, handlers.

Users may write any of them sync or async, so every call site would otherwise repeat "call it,
await the result if it is awaitable, check what came back". `call_user` is that rule, once.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

from hitl.errors import UserError


class ReturnTypeError(UserError, TypeError):
    """User code returned a value its caller cannot use.

    A `UserError` (the code using `hitl` is misconfigured, so retrying cannot help) and a
    `TypeError` (what these checks raised before they were written once here).
    """


async def call_user(
    fn: Callable[..., Any],
    /,
    *args: Any,
    expect: type | tuple[type, ...] | None = None,
    what: str,
    in_thread: bool = False,
) -> Any:
    """`fn(*args)`, awaited if it returns an awaitable, checked against `expect` if given.

    Args:
        fn: The user's function, sync or async.
        *args: Its positional arguments.
        expect: The type (or types) the result must have; `None` accepts anything.
        what: How an error names the function (`"approval_request of 'refund'"`).
        in_thread: Call `fn` in a worker thread (a sync tool that may block), then await what
            it returned if that is awaitable.

    Raises:
        ReturnTypeError: The result is not an `expect`.
    """
    result = await asyncio.to_thread(fn, *args) if in_thread else fn(*args)
    if inspect.isawaitable(result):
        result = await result
    if expect is not None and not isinstance(result, expect):
        raise ReturnTypeError(f"{what} must return {_names(expect)}, got {type(result).__name__}")
    return result


def _names(expect: type | tuple[type, ...]) -> str:
    """`ApprovalRequest or str`, `ToolApproved, ToolDenied or None`."""
    names = [
        "None" if t is type(None) else t.__name__
        for t in (expect if isinstance(expect, tuple) else (expect,))
    ]
    return " or ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
