"""The workflow sandbox our workers run: the SDK's, minus one cost it pays per payload.

For every payload of every workflow activation and completion (three passes each way: codec,
external storage, references), the SDK asks the workflow instance which serialization context
the payload's command has. The sandboxed instance answers by executing a code string inside the
sandbox (`exec` compiles it, and the sandbox's import and builtins restrictions are put in
place and taken down again): 22 such calls, about 4 ms of worker CPU, for replaying a parked
one-approval run, which is what reading an evicted run costs (docs/benchmarks.md).

The answer is a lookup in the SDK's own state (which activity, child workflow or external
workflow a command sequence number belongs to); it runs no workflow code and no user code, and
imports nothing. `FastContextRunner` asks the instance inside the sandbox for it directly, with
the same arguments, and gets the same object back. Everything else (workflow code, activations,
instance creation, the restrictions and pass-through modules) is the SDK's sandbox unchanged.

It reaches into the SDK's private `_Instance` (temporalio is pinned, see pyproject.toml); if a
release changes that, the instance falls back to the SDK's own path, and
`tests/unit/test_sandbox.py` fails so the shortcut is looked at again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from temporalio.converter import SerializationContext
from temporalio.converter._extstore import StorageDriverStoreContext
from temporalio.worker._workflow_instance import WorkflowInstance, WorkflowInstanceDetails
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner
from temporalio.worker.workflow_sandbox._runner import _Instance

_IN_SANDBOX = "__temporal_in_sandbox"
"""Where the SDK's sandboxed instance keeps its in-sandbox half (`InSandbox`)."""


@dataclass(frozen=True)
class FastContextRunner(SandboxedWorkflowRunner):
    """`SandboxedWorkflowRunner` whose instances answer serialization-context lookups directly."""

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        """A sandboxed instance (the SDK's), with the direct context lookups."""
        return FastContextInstance(det, self.runner_class, self.restrictions)


class FastContextInstance(_Instance):
    """The SDK's sandboxed workflow instance; context lookups skip the `exec` round trip."""

    def _in_sandbox(self) -> Any | None:
        return self.globals_and_locals.get(_IN_SANDBOX)

    def get_serialization_context(self, command_info: Any) -> SerializationContext | None:
        """The SDK's answer (`InSandbox.get_serialization_context`), asked directly."""
        inner = self._in_sandbox()
        if inner is None:  # not the SDK layout this was written against: its own path
            return super().get_serialization_context(command_info)
        context: SerializationContext | None = inner.get_serialization_context(command_info)
        return context

    def get_external_store_context(self, command_info: Any) -> StorageDriverStoreContext:
        """The SDK's answer (`InSandbox.get_external_store_context`), asked directly."""
        inner = self._in_sandbox()
        if inner is None:
            return super().get_external_store_context(command_info)
        context: StorageDriverStoreContext = inner.get_external_store_context(command_info)
        return context
