# ruff: noqa: ASYNC250  (the SDK examples are ported verbatim: one prompts with input())
"""The SDK's shell examples (the seed 003 points to them), ported by changing their imports
only, against the local OpenAI-wire server: the model's `shell_call` items come from the real
`openai` client, and the `shell_call_output` items go back to it. Then the durable variant:
a patch parks for approval, its worker is killed, a new worker applies it exactly once."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from hitl import Runner
from hitl.worker.devserver import DevServer
from tests.fake_openai import FakeOpenAI, Reply, fake_openai, response_body, responses_text
from tests.helpers import WorkerProcess, queue_name
from tests.sdk_tool_agents import LEDGER_NAME, PATCH_ROOT_ENV, patcher

RESPONSES = "/v1/responses"


@pytest.fixture
def wire(dev_server: DevServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """The seeds' environment: the cluster, a queue served in this process, the OpenAI wire."""
    monkeypatch.setenv("TEMPORAL_ADDRESS", dev_server.address)
    monkeypatch.setenv("HITL_TASK_QUEUE", queue_name("sdk-shell"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-shell")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "listed.txt").write_text("x")
    with fake_openai() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        yield server


def shell_turn(server: FakeOpenAI, call_id: str, *commands: str) -> None:
    call = {
        "type": "shell_call",
        "id": f"sh_{call_id}",
        "call_id": call_id,
        "action": {"commands": list(commands), "timeout_ms": 10000, "max_output_length": 4000},
        "status": "completed",
    }
    server.queue(RESPONSES, Reply(response_body([call], rid=f"resp_{call_id}")))


def sent_outputs(server: FakeOpenAI) -> list[dict[str, Any]]:
    return [
        item
        for r in server.requests_to(RESPONSES)
        for item in r.body["input"]
        if item.get("type") == "shell_call_output"
    ]


async def test_sdk_shell_example_on_approval_runs_with_its_imports_changed(
    wire: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`examples/tools/shell.py`: `on_approval` approves without an interruption."""
    monkeypatch.setenv("SHELL_AUTO_APPROVE", "1")
    shell_turn(wire, "call_ls", "ls")
    wire.queue(RESPONSES, Reply(response_body([responses_text("Listed.")], rid="resp_2")))

    import asyncio
    from collections.abc import Sequence

    from hitl import (
        Agent,
        ModelSettings,
        RunContextWrapper,
        Runner,
        ShellCallOutcome,
        ShellCommandOutput,
        ShellCommandRequest,
        ShellResult,
        ShellTool,
        ToolApprovalItem,
    )
    from hitl.sdk_tools import ShellOnApprovalFunctionResult
    from tests.sdk_ports import trace

    SHELL_AUTO_APPROVE = os.environ.get("SHELL_AUTO_APPROVE") == "1"

    class ShellExecutor:
        """Executes shell commands; approval is handled via ShellTool."""

        def __init__(self, cwd: Path | None = None):
            self.cwd = Path(cwd or Path.cwd())

        async def __call__(self, request: ShellCommandRequest) -> ShellResult:
            action = request.data.action

            outputs: list[ShellCommandOutput] = []
            for command in action.commands:
                proc = await asyncio.create_subprocess_shell(
                    command,
                    cwd=self.cwd,
                    env=os.environ.copy(),
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                )
                timed_out = False
                try:
                    # Zero is intentionally equivalent to no explicit Shell action timeout.
                    timeout = (action.timeout_ms or 0) / 1000 or None
                    stdout_bytes, stderr_bytes = await asyncio.wait_for(
                        proc.communicate(), timeout=timeout
                    )
                except TimeoutError:
                    proc.kill()
                    stdout_bytes, stderr_bytes = await proc.communicate()
                    timed_out = True

                stdout = stdout_bytes.decode("utf-8", errors="ignore")
                stderr = stderr_bytes.decode("utf-8", errors="ignore")
                outputs.append(
                    ShellCommandOutput(
                        command=command,
                        stdout=stdout,
                        stderr=stderr,
                        outcome=ShellCallOutcome(
                            type="timeout" if timed_out else "exit",
                            exit_code=getattr(proc, "returncode", None),
                        ),
                    )
                )

                if timed_out:
                    break

            return ShellResult(
                output=outputs,
                provider_data={"working_directory": str(self.cwd)},
            )

    async def prompt_shell_approval(commands: Sequence[str]) -> bool:
        """Simple CLI prompt for shell approvals."""
        if SHELL_AUTO_APPROVE:
            return True
        print("Shell command approval required:")
        for entry in commands:
            print(" ", entry)
        response = input("Proceed? [y/N] ").strip().lower()
        return response in {"y", "yes"}

    async def main(prompt: str, model: str) -> None:
        with trace("shell_example"):
            print(f"[info] Using model: {model}")

            async def on_shell_approval(
                _context: RunContextWrapper, approval_item: ToolApprovalItem
            ) -> ShellOnApprovalFunctionResult:
                raw = approval_item.raw_item
                commands: Sequence[str] = ()
                if isinstance(raw, dict):
                    action = raw.get("action", {})
                    if isinstance(action, dict):
                        commands = action.get("commands", [])
                else:
                    action_obj = getattr(raw, "action", None)
                    if action_obj and hasattr(action_obj, "commands"):
                        commands = action_obj.commands
                approved = await prompt_shell_approval(commands)
                return {
                    "approve": approved,
                    "reason": "user rejected" if not approved else "approved",
                }

            agent = Agent(
                name="Shell Assistant",
                model=model,
                instructions=(
                    "You can run shell commands using the shell tool. "
                    "Keep responses concise and include command output when helpful."
                ),
                tools=[
                    ShellTool(
                        executor=ShellExecutor(),
                        needs_approval=True,
                        on_approval=on_shell_approval,
                    )
                ],
                model_settings=ModelSettings(tool_choice="required"),
            )

            result = await Runner.run(agent, prompt)
            print(f"\nFinal response:\n{result.final_output}")

    await main("Show the list of files in the current directory.", "gpt-5.6-sol")

    assert "Final response:\nListed." in capsys.readouterr().out
    first = wire.requests_to(RESPONSES)[0].body
    assert {"type": "shell", "environment": {"type": "local"}} in first["tools"]
    [output] = sent_outputs(wire)
    assert output["call_id"] == "call_ls" and output["max_output_length"] == 4000
    assert "listed.txt" in output["output"][0]["stdout"]
    assert output["output"][0]["outcome"] == {"type": "exit", "exit_code": 0}
    second = wire.requests_to(RESPONSES)[1].body["input"]
    assert [i.get("type") for i in second[1:]] == ["shell_call", "shell_call_output"]


async def test_sdk_shell_human_in_the_loop_example_runs_with_its_imports_changed(
    wire: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    """`examples/tools/shell_human_in_the_loop.py`: interruptions, approve, resume."""
    shell_turn(wire, "call_pwd", "pwd")
    wire.queue(RESPONSES, Reply(response_body([responses_text("Done.")], rid="resp_2")))

    import asyncio
    import os
    from collections.abc import Sequence
    from pathlib import Path

    from hitl import (
        Agent,
        ModelSettings,
        Runner,
        ShellCallOutcome,
        ShellCommandOutput,
        ShellCommandRequest,
        ShellResult,
        ShellTool,
        ToolApprovalItem,
    )
    from tests.sdk_ports import trace
    from tests.sdk_tool_agents import confirm_with_fallback, is_auto_mode

    class ShellExecutor:
        """Executes shell commands; approvals are handled manually via interruptions."""

        def __init__(self, cwd: Path | None = None):
            self.cwd = Path(cwd or Path.cwd())

        async def __call__(self, request: ShellCommandRequest) -> ShellResult:
            action = request.data.action

            outputs: list[ShellCommandOutput] = []
            for command in action.commands:
                proc = await asyncio.create_subprocess_shell(
                    command,
                    cwd=self.cwd,
                    env=os.environ.copy(),
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                )
                timed_out = False
                try:
                    # Zero is intentionally equivalent to no explicit Shell action timeout.
                    timeout = (action.timeout_ms or 0) / 1000 or None
                    stdout_bytes, stderr_bytes = await asyncio.wait_for(
                        proc.communicate(), timeout=timeout
                    )
                except TimeoutError:
                    proc.kill()
                    stdout_bytes, stderr_bytes = await proc.communicate()
                    timed_out = True

                stdout = stdout_bytes.decode("utf-8", errors="ignore")
                stderr = stderr_bytes.decode("utf-8", errors="ignore")
                outputs.append(
                    ShellCommandOutput(
                        command=command,
                        stdout=stdout,
                        stderr=stderr,
                        outcome=ShellCallOutcome(
                            type="timeout" if timed_out else "exit",
                            exit_code=getattr(proc, "returncode", None),
                        ),
                    )
                )

                if timed_out:
                    break

            return ShellResult(
                output=outputs,
                provider_data={"working_directory": str(self.cwd)},
            )

    async def prompt_shell_approval(commands: Sequence[str]) -> tuple[bool, bool]:
        """Prompt for approval and optional always-approve choice."""
        print("Shell command approval required:")
        for entry in commands:
            print(f"  {entry}")
        auto_mode = is_auto_mode()
        decision = confirm_with_fallback("Approve? [y/N]: ", default=auto_mode)
        always = False
        if decision:
            always = confirm_with_fallback(
                "Approve all future shell calls? [y/N]: ",
                default=auto_mode,
            )
        return decision, always

    def _extract_commands(approval_item: ToolApprovalItem) -> Sequence[str]:
        raw = approval_item.raw_item
        if isinstance(raw, dict):
            action = raw.get("action", {})
            if isinstance(action, dict):
                commands = action.get("commands", [])
                if isinstance(commands, Sequence):
                    return [str(cmd) for cmd in commands]
        action_obj = getattr(raw, "action", None)
        if action_obj and hasattr(action_obj, "commands"):
            return list(action_obj.commands)
        return ()

    async def main(prompt: str, model: str) -> None:
        with trace("shell_hitl_example"):
            print(f"[info] Using model: {model}")

            agent = Agent(
                name="Shell HITL Assistant",
                model=model,
                instructions=(
                    "You can run shell commands using the shell tool. "
                    "Ask for approval before running commands."
                ),
                tools=[
                    ShellTool(
                        executor=ShellExecutor(),
                        needs_approval=True,
                    )
                ],
                model_settings=ModelSettings(tool_choice="required"),
            )

            result = await Runner.run(agent, prompt)

            while result.interruptions:
                print("\n== Pending approvals ==")
                state = result.to_state()
                for interruption in result.interruptions:
                    commands = _extract_commands(interruption)
                    approved, always = await prompt_shell_approval(commands)
                    if approved:
                        state.approve(interruption, always_approve=always)
                    else:
                        state.reject(interruption, always_reject=always)

                result = await Runner.run(agent, state)

            print(f"\nFinal response:\n{result.final_output}")

    await main("Show the current working directory.", "gpt-5.6-sol")

    out = capsys.readouterr().out
    assert "Shell command approval required:\n  pwd" in out
    assert "Final response:\nDone." in out
    [output] = sent_outputs(wire)
    assert output["output"][0]["stdout"].strip() == os.getcwd()


async def test_a_parked_patch_survives_its_worker_and_applies_exactly_once(
    dev_server: DevServer, dev_client: Client, tmp_path: Path
) -> None:
    (tmp_path / "notes.txt").write_text("first\nsecond\n")
    tq = queue_name("sdk-patch-durable")
    env = {PATCH_ROOT_ENV: str(tmp_path)}
    opts: dict[str, Any] = {"client": dev_client, "task_queue": tq, "serve": False}
    worker = WorkerProcess(dev_server.address, tq, "tests.sdk_tool_agents:patcher", env).start()
    try:
        paused = await Runner.run(patcher, "fix the notes", **opts)
        [item] = paused.interruptions
        assert item.raw_item["type"] == "apply_patch_call"
        assert item.raw_item["operation"]["path"] == "notes.txt"
        saved = paused.to_state().to_string()
    finally:
        worker.kill()
    assert (tmp_path / "notes.txt").read_text() == "first\nsecond\n", "nothing before approval"

    from hitl import RunState

    with WorkerProcess(dev_server.address, tq, "tests.sdk_tool_agents:patcher", env):
        state = await RunState.from_string(patcher, saved)
        state.approve(state.interruptions[0])
        done = await Runner.run(patcher, state, **opts)
        again = await Runner.run(patcher, state, **opts)  # the approval sent twice
    assert done.final_output == again.final_output == "completed: updated notes.txt"
    assert (tmp_path / "notes.txt").read_text() == "first\nSECOND\n"
    assert len((tmp_path / LEDGER_NAME).read_text().splitlines()) == 1, "applied exactly once"
