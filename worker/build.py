"""Build a Temporal worker that serves agents: the `AgentRun` workflow plus our activities."""

from __future__ import annotations

import compileall
import contextlib
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.plugin import SimplePlugin
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

import hitl.workflows
from hitl.activities.agents import AgentActivities
from hitl.activities.hooks import HookActivities
from hitl.activities.ledger import LedgerActivities
from hitl.activities.model import ModelActivities
from hitl.activities.notify import NotifyActivities
from hitl.activities.policy import PolicyActivities, worker_policy
from hitl.activities.runs import read_run
from hitl.activities.sessions import SessionActivities
from hitl.admin import search_attributes_ready
from hitl.agent import Agent
from hitl.ledger import TemporalLimitLedger
from hitl.notify import notifiers_from_env
from hitl.policy import LimitLedger, PolicyDocument
from hitl.registry import AgentRegistry
from hitl.signing import directory_from_env, signing_available
from hitl.wire import DEFAULT_TASK_QUEUE, ApproverDirectory, PinnedPolicy
from hitl.worker.policy_watch import RegistryWatch, WatchRegistry, registry_watch
from hitl.worker.sandbox import FastContextRunner
from hitl.workflows.agent_run import AgentRun
from hitl.workflows.ledger import HitlLedger
from hitl.workflows.policy_registry import PolicyRegistry
from hitl.workflows.session import AgentSession

log = logging.getLogger(__name__)

# Modules the workflow sandbox shares with the worker instead of re-importing per run: the
# whole `hitl` package (its workflow code is deterministic and keeps no module state; the
# per-run forced-replay tests check that), and pydantic (saves ~13 ms CPU per run). The sandbox
# would otherwise import `hitl/__init__` (the client API) again for every run. `cryptography`
# must be shared too (see below).
PASSTHROUGH = (
    "hitl",
    "pydantic",
    "pydantic_core",
    "annotated_types",
    "typing_inspection",
    # Signed decisions are verified in workflow code; the Rust extension imports its exception
    # classes lazily, and a second copy imported inside the sandbox aborts the process.
    "cryptography",
)


def workflow_runner() -> SandboxedWorkflowRunner:
    """The sandbox our workflows run in; a `Replayer` of their histories must use it too.

    The SDK's sandbox, with serialization-context lookups asked directly (`hitl.worker.sandbox`).
    """
    signing_available()  # signatures are checked in workflow code: import their modules here
    return FastContextRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH)
    )


DEFAULT_MAX_CACHED_WORKFLOWS = 100
"""Bounded by default: parked runs are evicted and replayed (a few ms) when a decision comes."""

DEFAULT_MAX_CONCURRENT_WORKFLOW_TASKS = 20
"""Workflow tasks at once (the SDK's default is 100). They are CPU work in one Python process, so
more in flight only queues them: a first task with its local activities waits past the 10 s task
timeout and is done again (see docs/benchmarks.md)."""

DEFAULT_STICKY_QUEUE_TIMEOUT = 10.0
"""Temporal's default `sticky_queue_schedule_to_start_timeout`, in seconds."""

DEFAULT_GRACEFUL_SHUTDOWN = 10.0
"""Seconds in-flight activities get to finish when the worker stops."""


@dataclass
class WorkerOptions:
    """Tuning knobs (see docs/production.md for the trade-offs).

    Attributes:
        task_queue: Queue the worker polls.
        max_cached_workflows: Runs kept in memory; parked runs beyond it are replayed on wake-up.
        max_concurrent_activities: Tool and model calls at once.
        max_concurrent_workflow_tasks: Workflow tasks (CPU-bound, one process) at once.
        graceful_shutdown: Seconds in-flight activities get to finish on shutdown.
        activities_only: Serve activities only (no `AgentRun` workflows): a tool or model worker
            for a run whose `RunConfig(tool_task_queue=...)` / `model_task_queue` names this
            queue.
        sticky_queue_timeout: Seconds a run's next workflow task waits for the worker that has
            it cached before any worker may take it (Temporal's default is 10). Lower means a
            faster takeover after a worker crash, and more cache misses (replays) for a busy
            worker.
    """

    task_queue: str = DEFAULT_TASK_QUEUE
    search_attributes: bool | None = None
    """Keep `HitlStatus` & co. current: `None` checks the cluster (and rechecks every minute)."""
    max_cached_workflows: int = DEFAULT_MAX_CACHED_WORKFLOWS
    max_concurrent_activities: int | None = None
    max_concurrent_workflow_tasks: int = DEFAULT_MAX_CONCURRENT_WORKFLOW_TASKS
    graceful_shutdown: float = DEFAULT_GRACEFUL_SHUTDOWN
    activities_only: bool = False
    sticky_queue_timeout: float = DEFAULT_STICKY_QUEUE_TIMEOUT


def traces(client: Client) -> bool:
    """True when the client (hence its workers) carries the OpenTelemetry plugin."""
    plugins = client.config().get("plugins", [])
    return any(type(p).__name__ == "OpenTelemetryPlugin" for p in plugins)


async def check_cluster(client: Client) -> None:
    """Check once at start that the namespace is ready for runs; log what to fix (`hitl setup`).

    Nothing depends on the answer here: each run asks again when it starts (`resolve_agent`).
    """
    await search_attributes_ready(client)


def cache_workflow_bytecode(package_dir: Path | None = None) -> None:
    """Write the `workflows` package's bytecode if it is missing or stale.

    The sandbox imports the workflow modules afresh for every new run and every replay of an
    evicted one. Without a `.pyc` (e.g. `PYTHONDONTWRITEBYTECODE=1`, a source checkout), each of
    those imports compiles the source again: ~27 ms of CPU per run here. pip-installed copies
    already have bytecode; a read-only tree is left as it is.
    """
    if not sys.dont_write_bytecode:
        return
    try:
        where = package_dir or Path(hitl.workflows.__file__).parent
        compileall.compile_dir(where, quiet=2, maxlevels=0)
    except OSError as exc:  # pragma: no cover - read-only install
        log.debug("workflow bytecode not cached: %s", exc)


class ReleaseOnStop(SimplePlugin):
    """Runs `close` (releasing what the worker's activities opened) once the worker has stopped.

    Its own type, so that a client carrying a `SimplePlugin` of its own draws no "same plugin
    type" warning from the SDK.
    """

    def __init__(self, close: Callable[[], Awaitable[None]]) -> None:
        @contextlib.asynccontextmanager
        async def lifetime() -> AsyncIterator[None]:
            try:
                yield
            finally:
                try:
                    await close()
                except Exception:  # (logged: it must not hide how the worker itself ended)
                    log.warning("releasing after the worker stopped failed", exc_info=True)

        super().__init__("hitl.ReleaseOnStop", run_context=lifetime)


def build_worker(
    client: Client,
    agents: Iterable[Agent[Any]] | AgentRegistry,
    options: WorkerOptions | None = None,
    *,
    identity: str | None = None,
    allow: Iterable[Any] = (),
    directory: ApproverDirectory | None = None,
    notifiers: Iterable[Any] | None = None,
    policy: str | Path | PolicyDocument | None = None,
    ledger: LimitLedger | None = None,
    policy_registry: bool | str | RegistryWatch = False,
) -> Worker:
    """A worker for `agents` on `options.task_queue` (not started: use `async with` or `run()`).

    Every worker registers all our activities (`options.activities_only` leaves out the
    workflows: a tool or model worker). `allow` lists what runs may name besides the agents'
    own code (`hitl.refs`). Runs started here pin the approver `directory` (`None`: the file
    `HITL_APPROVERS` names) and the approval `policy` (a file or a `PolicyDocument`; `None`:
    `HITL_POLICY`), whose limit rules the `ledger` answers (default: the namespace's
    `HitlLedger` workflows). `policy_registry` (`True`, its id, or a `RegistryWatch`): runs
    pin the policy registry's policy (`hitl.worker.policy_watch`). `notifiers` hear of calls.
    """
    opts = options or WorkerOptions()
    if not opts.activities_only:
        cache_workflow_bytecode()
    if isinstance(agents, AgentRegistry):
        registry = agents
        registry.allowed.add(*allow)
    else:
        registry = AgentRegistry(agents, allow=allow)
    ledger = ledger if ledger is not None else TemporalLimitLedger()
    watch = None if opts.activities_only else registry_watch(policy_registry)
    source = _policy_source(worker_policy(policy, ledger), watch)
    plugins = [WatchRegistry(watch, client, opts.task_queue)] if watch is not None else []
    model = ModelActivities(registry, ledger=ledger)
    activities = _activities(client, registry, model, opts, directory, notifiers, source)
    kwargs: dict[str, Any] = {"identity": identity} if identity else {}
    return Worker(
        client,
        task_queue=opts.task_queue,
        workflows=[] if opts.activities_only else _workflows(watch is not None),
        activities=activities,
        workflow_runner=workflow_runner(),
        max_cached_workflows=opts.max_cached_workflows,
        max_concurrent_activities=opts.max_concurrent_activities,
        max_concurrent_workflow_tasks=opts.max_concurrent_workflow_tasks,
        graceful_shutdown_timeout=timedelta(seconds=opts.graceful_shutdown),
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=opts.sticky_queue_timeout),
        # The SDK would fail every workflow task that answers an update carrying more than 2 MB
        # (the rejection echoes the request): anyone could jam a run with one such update. Sent
        # on, the server refuses just that update and the run goes on. Our own commands never
        # reach the limit (results and continue-as-new state are size-checked in the workflow).
        disable_payload_error_limit=True,
        # Model clients hold connection pools: closed when the worker stops, not left for the
        # garbage collector (which would schedule their close on whatever loop runs then).
        plugins=[ReleaseOnStop(model.aclose), *plugins],
        **kwargs,
    )


def _policy_source(
    pinned: PinnedPolicy | None, watch: RegistryWatch | None
) -> PinnedPolicy | Callable[[], PinnedPolicy | None] | None:
    """What runs started here pin: the worker's file, or the registry's policy (else the file)."""
    if watch is None:
        return pinned
    watch.fallback = pinned
    return watch.policy


def _workflows(policy_registry: bool) -> list[type]:
    """Our workflows (runs, sessions, limit ledgers); the policy registry if asked for."""
    return [AgentRun, AgentSession, HitlLedger, *([PolicyRegistry] if policy_registry else [])]


def _activities(
    client: Client,
    registry: AgentRegistry,
    model: ModelActivities,
    opts: WorkerOptions,
    directory: ApproverDirectory | None,
    notifiers: Iterable[Any] | None,
    policy: PinnedPolicy | Callable[[], PinnedPolicy | None] | None = None,
) -> list[Callable[..., Any]]:
    """Every activity of ours, for the agents in `registry` (any worker can run any of them).

    The approver directory and the notifiers come from the environment when not given.
    """
    tools = model.planner
    sessions = SessionActivities()
    ledger = LedgerActivities()
    hooks = HookActivities(registry)
    notes = NotifyActivities(notifiers_from_env() if notifiers is None else list(notifiers))
    agent_acts = AgentActivities(
        registry,
        search_attributes=opts.search_attributes,
        tracing=traces(client),
        directory=directory if directory is not None else directory_from_env(),
        notify=bool(notes.notifiers),
        policy=policy,
    )
    return [
        agent_acts.registry_directory,
        agent_acts.resolve_agent,
        agent_acts.handle_run_error,
        PolicyActivities(tools.ledger).reevaluate_policy,
        model.call_model,
        tools.plan_tools,
        tools.execute_tool,
        tools.rejection_text,
        sessions.load_session,
        sessions.save_session,
        ledger.ledger_release,
        ledger.ledger_commit,
        hooks.run_guardrails,
        hooks.filter_handoff,
        read_run,
        notes.notify,
    ]
