"""Function tools: `@function_tool` and the approval policy each tool declares."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from hitl._user_code import call_user
from hitl.approval import ApprovalCall, ApprovalRequest, ToolApproved, ToolDenied, UserAction
from hitl.context import RunContextWrapper, ToolContext, is_context_annotation
from hitl.errors import UserError
from hitl.guardrails import ToolInputGuardrail
from hitl.items import strict_json
from hitl.limits import MAX_APPROVER_CHARS, MAX_APPROVERS, MAX_REQUIRED_APPROVALS
from hitl.schema import ensure_strict_json_schema, parse_docstring
from hitl.wire import ApprovalMode, ToolSpec

DEFAULT_HEARTBEAT_TIMEOUT = 5.0
"""Seconds without a heartbeat before a tool's attempt is presumed lost (its worker died) and
retried elsewhere. The activity beats every third of it while the tool runs, so a crash costs
a few seconds, not the tool's whole `timeout`; the retry carries the same idempotency key."""

ApprovalPredicate: TypeAlias = Callable[
    [RunContextWrapper[Any], dict[str, Any], str], bool | Awaitable[bool]
]
"""`(ctx, params, call_id) -> bool`, sync or async; runs in an activity, never in the workflow."""

ApproversFunction: TypeAlias = Callable[
    [RunContextWrapper[Any], dict[str, Any], str], list[str] | Awaitable[list[str]]
]
"""`(ctx, params, call_id) -> list[str]`, sync or async: who may decide this call (approver
names or `group:<name>`), e.g. finance leads for refunds over a limit. Evaluated in an activity,
on the model's arguments and again on a person's edit."""

RequiredApprovalsFunction: TypeAlias = Callable[
    [RunContextWrapper[Any], dict[str, Any], str], int | Awaitable[int]
]
"""`(ctx, params, call_id) -> int`, sync or async: how many distinct people must approve this
call (e.g. 2 for refunds over $1,000); runs in an activity, never in the workflow."""

ApprovalRequestFunction: TypeAlias = Callable[..., Any]
"""`(params) -> ApprovalRequest | str` or `(ctx, params) -> ...`, sync or async, no side effects."""

ApproverFunction: TypeAlias = Callable[
    [RunContextWrapper[Any], ApprovalCall], ToolApproved | ToolDenied | Awaitable[Any] | None
]
"""`(ctx, call) -> ToolApproved | ToolDenied | None`; `None` defers to a person."""


class ToolArgumentsError(ValueError):
    """The model's arguments do not fit the tool's parameters."""


@dataclass
class FunctionTool:
    """A Python function the model can call.

    Build it with `@function_tool`, whose arguments set these fields: they are the tool's
    recorded policy, documented here once.

    Attributes:
        name: Name the model calls it by (`name_override`; default: the function's name).
        description: What the tool does, for the model (`description_override`; default: the
            docstring's description).
        params_json_schema: JSON schema of the arguments, from the signature and docstring.
        func: The wrapped function.
        needs_approval: `True` (always ask), `False` (never ask), or a predicate
            `(ctx, params, call_id) -> bool`, sync or async, evaluated in an activity.
        strict_json_schema: Whether the schema follows OpenAI's strict mode, all parameters
            required and no extras (`strict_mode`).
        timeout: Seconds one attempt may take (the activity's start-to-close timeout).
        heartbeat_timeout: Seconds without a heartbeat before a crashed worker is presumed dead
            and the attempt is retried (the tool need not heartbeat itself: the activity beats
            while it runs, sync tools included). `None` disables it.
        max_attempts: Attempts for retryable failures; keep it low for side effects, and give
            side-effecting tools an idempotency key (`ctx.idempotency_key`).
        approval_timeout: Seconds a call may wait for a decision before it is rejected as
            expired; `None` waits forever.
        approval_request: Renders the approval request (title, message, preview):
            `(params) -> ApprovalRequest | str` or `(ctx, params) -> ...`, sync or async,
            in an activity before the run pauses. Default: the tool's name and arguments.
        auto_approve: This tool's key of two-key auto-approval: with the run's preset also on
            (`RunConfig(auto_approve=True)`), calls are approved without a person.
        approver: A programmatic approver `(ctx, ApprovalCall) -> ToolApproved | ToolDenied |
            None` consulted before a person (`None` defers to a person).
        tool_input_guardrails: Checks run (in the tool's activity) right before it executes;
            they may reject the call (the model sees their message) or stop the run.
        timeout_behavior: When an attempt exceeds `timeout`: tell the model
            (`"error_as_result"`) or fail the run with `ToolTimeoutError`.
        approvers: Who may decide this tool's calls (approver ids or `group:<name>`, e.g.
            `["group:finance"]`); others are refused with `NotAuthorized`. Empty: anyone (or
            the run's list). Or `(ctx, params, call_id) -> list[str]`, evaluated in an
            activity (on the model's arguments, and again on a person's edit).
        required_approvals: Distinct people who must approve a call before it runs (four eyes:
            2), or `(ctx, params, call_id) -> int` deciding per call, in an activity. Each
            approval must name its approver; rules, approver callbacks and auto-approval never
            approve such a call (they may reject it); one rejection rejects it.
        called_on_rejection: A tool that takes a `UserAction` is also called when its call is
            rejected or expires (with `primary_confirmed=False`), and what it returns is what
            the model sees. Off by default: a rejected call runs no tool code.
        allow_edits: Whether a person may approve a call with edited arguments (checked against
            the schema; the approval requirement is evaluated on them again).
        signed_decisions: Decisions on this tool's calls must be signed by a key in the
            worker's approver directory (`HITL_APPROVERS`) whose owner is the approver.
        remind_after: Seconds a call waits before people are reminded (a `reminder`
            notification).
        escalate_after: Seconds a call waits before `escalate_to` may decide it too (people are
            notified).
        escalate_to: Approvers or groups (`group:<name>`) added when a call escalates.
        retry_safe: `False` for a tool whose effect must not be repeated blindly: it runs one
            attempt, and an attempt that dies (worker crash, timeout) parks the call as
            *uncertain* until a person says whether the effect happened (with its result), to
            run it again, or to give up.
        local_activity: Run calls as local activities: on the worker that runs the run, inside
            the workflow task that decided them (an approval's, or the model answer's), which
            saves a workflow task and an activity task per call. For quick, retry-safe tools
            (a lookup, an idempotent API call): a call holds its workflow task while it runs,
            shows no pending activity in the UI, has no heartbeat timeout, and ignores
            `RunConfig.tool_task_queue`. Needs `retry_safe=True`: a worker that dies midway
            reruns the call without asking anyone.
    """

    name: str
    description: str
    params_json_schema: dict[str, Any]
    func: Callable[..., Any]
    needs_approval: bool | ApprovalPredicate | Literal["policy"] = False
    strict_json_schema: bool = True
    timeout: float = 300.0
    heartbeat_timeout: float | None = DEFAULT_HEARTBEAT_TIMEOUT
    max_attempts: int = 3
    approval_timeout: float | None = None
    approval_request: ApprovalRequestFunction | None = None
    auto_approve: bool = False
    approver: ApproverFunction | None = None
    tool_input_guardrails: list[ToolInputGuardrail] = field(default_factory=list)
    timeout_behavior: Literal["error_as_result", "raise_exception"] = "error_as_result"
    approvers: list[str] | ApproversFunction = field(default_factory=list)
    required_approvals: int | RequiredApprovalsFunction = 1
    called_on_rejection: bool = False
    allow_edits: bool = True
    signed_decisions: bool = False
    remind_after: float | None = None
    escalate_after: float | None = None
    escalate_to: list[str] = field(default_factory=list)
    retry_safe: bool = True
    local_activity: bool = False
    categories: list[str] = field(default_factory=list)
    _args_model: type[BaseModel] | None = field(default=None, repr=False)
    _takes_context: bool = field(default=False, repr=False)
    _user_action_param: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.local_activity and not self.retry_safe:
            raise UserError(
                f"local_activity=True needs retry_safe=True on {self.name!r}: a local activity "
                "whose worker dies midway runs again without a person's call"
            )

    @property
    def approval_mode(self) -> ApprovalMode:
        """How approval is decided: never, always, or by the predicate (in an activity)."""
        if callable(self.needs_approval) or self.needs_approval == "policy":
            return "predicate"
        return "always" if self.needs_approval else "never"

    def spec(self) -> ToolSpec:
        """The tool as data, recorded in the run's agent graph."""
        return ToolSpec(
            name=self.name,
            description=self.description,
            params_json_schema=self.params_json_schema,
            strict_json_schema=self.strict_json_schema,
            approval=self.approval_mode,
            timeout_seconds=self.timeout,
            heartbeat_timeout_seconds=self.heartbeat_timeout,
            max_attempts=self.max_attempts,
            approval_timeout_seconds=self.approval_timeout,
            auto_approve=self.auto_approve,
            approval_request=self.approval_request is not None,
            approver=self.approver is not None,
            user_action=self.receives_user_action,
            input_guardrails=[g.get_name() for g in self.tool_input_guardrails],
            timeout_behavior=self.timeout_behavior,
            approvers=[] if callable(self.approvers) else list(self.approvers),
            approvers_by_call=callable(self.approvers),
            required_approvals=(
                self.required_approvals if isinstance(self.required_approvals, int) else 1
            ),
            called_on_rejection=self.called_on_rejection,
            allow_edits=self.allow_edits,
            signed_decisions=self.signed_decisions,
            remind_after_seconds=self.remind_after,
            escalate_after_seconds=self.escalate_after,
            escalate_to=list(self.escalate_to),
            retry_safe=self.retry_safe,
            local_activity=self.local_activity,
            categories=list(self.categories),
            defers_to_policy=self.needs_approval == "policy",
        )

    def parse_arguments(self, arguments: str) -> dict[str, Any]:
        """Validate the model's JSON arguments (`ToolArgumentsError` says what is wrong)."""
        try:
            # Strict: `NaN` or `Infinity` would compare false with every number, so a predicate
            # such as "amount > 100 needs approval" would let them through.
            raw = strict_json(arguments) if arguments and arguments.strip() else {}
        except ValueError as exc:
            raise ToolArgumentsError(f"arguments are {exc}") from None
        if not isinstance(raw, dict):
            raise ToolArgumentsError("arguments must be a JSON object")
        if self._args_model is None:
            return raw
        try:
            parsed = self._args_model.model_validate(raw)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}"
                for err in exc.errors()
            )
            raise ToolArgumentsError(f"invalid arguments for {self.name}: {problems}") from None
        return {name: getattr(parsed, name) for name in type(parsed).model_fields}

    @property
    def receives_user_action(self) -> bool:
        """True when the tool takes a `UserAction` parameter."""
        return self._user_action_param is not None

    async def invoke(
        self, ctx: ToolContext[Any], arguments: str, action: UserAction | None = None
    ) -> Any:
        """Validate the arguments and call the function (sync functions run in a thread)."""
        kwargs = self.parse_arguments(arguments)
        if self._user_action_param is not None:
            kwargs[self._user_action_param] = action or UserAction(primary_confirmed=True)
        args: tuple[Any, ...] = (ctx,) if self._takes_context else ()
        return await call_user(
            functools.partial(self.func, *args, **kwargs),
            what=f"tool {self.name!r}",
            in_thread=not inspect.iscoroutinefunction(self.func),  # a sync tool may block
        )

    async def render_request(
        self, ctx: RunContextWrapper[Any], params: dict[str, Any]
    ) -> ApprovalRequest | None:
        """Run the tool's `approval_request` function (in an activity); `None` if it has none."""
        fn = self.approval_request
        if fn is None:
            return None
        positional = [
            p
            for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        result = await call_user(
            fn,
            *((ctx, params) if len(positional) >= 2 else (params,)),
            expect=(ApprovalRequest, str),
            what=f"approval_request of {self.name!r}",
        )
        return ApprovalRequest(message=result) if isinstance(result, str) else result

    async def evaluate_needs_approval(
        self, ctx: RunContextWrapper[Any], params: dict[str, Any], call_id: str
    ) -> bool:
        """Evaluate the approval policy for one call (in an activity)."""
        policy = self.needs_approval
        if policy == "policy":
            return False  # the code defers: the run's policy decides (hitl.policy)
        if not callable(policy):
            return bool(policy)
        what = f"needs_approval of {self.name!r}"
        return bool(await call_user(policy, ctx, params, call_id, what=what))

    async def evaluate_approvers(
        self, ctx: RunContextWrapper[Any], params: dict[str, Any], call_id: str
    ) -> list[str] | None:
        """Who may decide this call, when a callable decides (in an activity)."""
        fn = self.approvers
        if not callable(fn):
            return None
        result = await call_user(fn, ctx, params, call_id, what=f"approvers of {self.name!r}")
        if (
            not isinstance(result, list | tuple)
            or len(result) > MAX_APPROVERS
            or not all(isinstance(a, str) and 0 < len(a) <= MAX_APPROVER_CHARS for a in result)
        ):
            raise ValueError(
                f"approvers of {self.name!r} must return a list of at most {MAX_APPROVERS} "
                f"names (1 to {MAX_APPROVER_CHARS} characters), got {result!r:.200}"
            )
        return list(result)

    async def evaluate_required_approvals(
        self, ctx: RunContextWrapper[Any], params: dict[str, Any], call_id: str
    ) -> int | None:
        """How many approvers this call needs, when a callable decides (in an activity)."""
        count = self.required_approvals
        if not callable(count):
            return None
        what = f"required_approvals of {self.name!r}"
        result = await call_user(count, ctx, params, call_id, what=what)
        if (
            not isinstance(result, int)
            or isinstance(result, bool)
            or not 1 <= result <= MAX_REQUIRED_APPROVALS
        ):
            raise ValueError(
                f"{what} must return an int from 1 to {MAX_REQUIRED_APPROVALS}, got {result!r}"
            )
        return result


def _build_args_model(
    func: Callable[..., Any], name: str, param_docs: dict[str, str]
) -> tuple[type[BaseModel], bool, str | None]:
    sig = inspect.signature(func)
    try:
        hints = get_type_hints(func, include_extras=True)
    except Exception as exc:
        raise UserError(f"cannot read the type hints of tool {name!r}: {exc}") from exc
    params = list(sig.parameters.values())
    takes_context = False
    if params and is_context_annotation(hints.get(params[0].name)):
        takes_context = True
        params = params[1:]
    fields: dict[str, Any] = {}
    user_action: str | None = None
    for p in params:
        if hints.get(p.name) is UserAction:
            user_action = p.name  # filled in at execution, never shown to the model
            continue
        if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise UserError(f"tool {name!r}: *args and **kwargs cannot be described to a model")
        if is_context_annotation(hints.get(p.name)):
            raise UserError(f"tool {name!r}: the context parameter must come first")
        annotation = hints.get(p.name, Any)
        default = ... if p.default is inspect.Parameter.empty else p.default
        fields[p.name] = (annotation, Field(default, description=param_docs.get(p.name)))
    model = create_model(f"{name}_args", __config__=ConfigDict(extra="forbid"), **fields)
    return model, takes_context, user_action


ToolFunction: TypeAlias = Callable[..., Any]


@overload
def function_tool(func: ToolFunction, /) -> FunctionTool: ...


@overload
def function_tool(
    *,
    name_override: str | None = None,
    description_override: str | None = None,
    needs_approval: bool | ApprovalPredicate | Literal["policy"] = False,
    strict_mode: bool = True,
    timeout: float = 300.0,
    heartbeat_timeout: float | None = DEFAULT_HEARTBEAT_TIMEOUT,
    max_attempts: int = 3,
    approval_timeout: float | None = None,
    approval_request: ApprovalRequestFunction | None = None,
    auto_approve: bool = False,
    approver: ApproverFunction | None = None,
    tool_input_guardrails: list[ToolInputGuardrail] | None = None,
    timeout_behavior: Literal["error_as_result", "raise_exception"] = "error_as_result",
    approvers: list[str] | ApproversFunction | None = None,
    required_approvals: int | RequiredApprovalsFunction = 1,
    called_on_rejection: bool = False,
    allow_edits: bool = True,
    signed_decisions: bool = False,
    remind_after: float | None = None,
    escalate_after: float | None = None,
    escalate_to: list[str] | None = None,
    retry_safe: bool = True,
    local_activity: bool = False,
    categories: list[str] | None = None,
) -> Callable[[ToolFunction], FunctionTool]: ...


def function_tool(
    func: ToolFunction | None = None,
    /,
    *,
    name_override: str | None = None,
    description_override: str | None = None,
    needs_approval: bool | ApprovalPredicate | Literal["policy"] = False,
    strict_mode: bool = True,
    timeout: float = 300.0,
    heartbeat_timeout: float | None = DEFAULT_HEARTBEAT_TIMEOUT,
    max_attempts: int = 3,
    approval_timeout: float | None = None,
    approval_request: ApprovalRequestFunction | None = None,
    auto_approve: bool = False,
    approver: ApproverFunction | None = None,
    tool_input_guardrails: list[ToolInputGuardrail] | None = None,
    timeout_behavior: Literal["error_as_result", "raise_exception"] = "error_as_result",
    approvers: list[str] | ApproversFunction | None = None,
    required_approvals: int | RequiredApprovalsFunction = 1,
    called_on_rejection: bool = False,
    allow_edits: bool = True,
    signed_decisions: bool = False,
    remind_after: float | None = None,
    escalate_after: float | None = None,
    escalate_to: list[str] | None = None,
    retry_safe: bool = True,
    local_activity: bool = False,
    categories: list[str] | None = None,
) -> FunctionTool | Callable[[ToolFunction], FunctionTool]:
    """Turn a function into a tool; its JSON schema comes from the signature and docstring.

    Use it bare (`@function_tool`) or with options (`@function_tool(needs_approval=True)`). The
    first parameter may be a `ToolContext` / `RunContextWrapper` (by annotation): it is filled
    in at call time and not shown to the model. A parameter annotated `UserAction` receives the
    person's action at execution (not shown to the model either); the tool must act only when
    `action.primary_confirmed` is true. Sync functions run in a thread.

    `name_override` and `description_override` replace the function's name and its docstring's
    description; `strict_mode` asks for OpenAI's strict JSON schema (all parameters required,
    no extras). Every other argument sets the `FunctionTool` field of the same name, where each
    is documented: who must approve a call and how (`needs_approval`, `approvers`,
    `required_approvals`, `approver`, `auto_approve`, `signed_decisions`, `allow_edits`,
    `approval_request`), how long it may wait (`approval_timeout`, `remind_after`,
    `escalate_after`, `escalate_to`), and how it runs (`timeout`, `heartbeat_timeout`,
    `max_attempts`, `timeout_behavior`, `retry_safe`, `local_activity`,
    `tool_input_guardrails`, `called_on_rejection`), and what approval policies match it by
    (`categories`; `needs_approval="policy"` lets the run's policy decide, docs/policies.md).

    Raises:
        UserError: When the function is decorated: a policy that cannot hold (e.g.
            `required_approvals=2` on a tool that needs no approval), or parameters a model
            cannot be told about (`*args`, a context parameter that is not first).
    """
    options = dict(locals())  # every argument, named once: in the signature above
    del options["func"]

    def build(fn: ToolFunction) -> FunctionTool:
        return _build_tool(fn, **options)

    return build(func) if func is not None else build


def _build_tool(
    fn: ToolFunction,
    *,
    name_override: str | None,
    description_override: str | None,
    strict_mode: bool,
    **policy: Any,
) -> FunctionTool:
    """`function_tool`'s work: check the policy, describe the parameters, build the tool."""
    if not callable(fn):
        raise UserError("@function_tool decorates a function")
    needs_approval = policy["needs_approval"]
    if not (
        isinstance(needs_approval, bool) or callable(needs_approval) or needs_approval == "policy"
    ):
        raise UserError('needs_approval must be True, False, a callable or "policy"')
    _check_required_approvals(policy["required_approvals"], needs_approval)
    name = name_override or fn.__name__
    description, param_docs = parse_docstring(fn.__doc__)
    model, takes_context, user_action = _build_args_model(fn, name, param_docs)
    if policy["called_on_rejection"] and user_action is None:
        raise UserError(
            f"called_on_rejection needs a UserAction parameter on {name!r} (it is how the "
            "tool learns the call was rejected)"
        )
    schema = model.model_json_schema()
    schema.pop("title", None)
    approvers = policy["approvers"]
    return FunctionTool(
        name=name,
        description=description_override or description,
        params_json_schema=ensure_strict_json_schema(schema) if strict_mode else schema,
        func=fn,
        strict_json_schema=strict_mode,
        **{
            **policy,
            # The tool keeps lists of its own (the caller's may change later).
            "tool_input_guardrails": list(policy["tool_input_guardrails"] or []),
            "approvers": approvers if callable(approvers) else list(approvers or []),
            "escalate_to": list(policy["escalate_to"] or []),
            "categories": _categories(policy["categories"]),
        },
        _args_model=model,
        _takes_context=takes_context,
        _user_action_param=user_action,
    )


def _categories(value: list[str] | None) -> list[str]:
    """A tool's categories (what approval policies match on): short names, a few."""
    cats = list(value or [])
    if len(cats) > 20 or not all(
        isinstance(c, str) and 0 < len(c) <= 100 and c.isprintable() for c in cats
    ):
        raise UserError("categories are at most 20 names of 1 to 100 printable characters")
    return cats


def _check_required_approvals(
    count: int | RequiredApprovalsFunction, needs_approval: bool | ApprovalPredicate | str
) -> None:
    if callable(count):
        if needs_approval is False:
            raise UserError("required_approvals needs needs_approval (True or a predicate)")
        return
    if not isinstance(count, int) or isinstance(count, bool):
        raise UserError("required_approvals must be an int or a callable")
    if not 1 <= count <= MAX_REQUIRED_APPROVALS:
        raise UserError(f"required_approvals must be from 1 to {MAX_REQUIRED_APPROVALS}")
    if count > 1 and needs_approval is False:
        raise UserError(
            f"required_approvals={count} needs needs_approval (True or a predicate): "
            "a call that needs no approval has no approvers"
        )


def tool_output_text(value: Any) -> str:
    """Render a tool's return value as the text the model sees."""
    if isinstance(value, str):
        return value
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return json.dumps(dataclasses.asdict(value), default=str)
    if isinstance(value, dict | list | tuple | int | float | bool) or value is None:
        return json.dumps(value, default=str)
    return str(value)
