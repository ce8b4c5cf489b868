"""Talking to runs the way a hostile caller can: raw payloads, any number, any encoding.

These go straight to the frontend's gRPC API (what the `temporal` CLI calls), bypassing every
check our client library would make.
"""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import dataclass
from typing import Any

from temporalio.api.common.v1 import Payload, Payloads, WorkflowExecution, WorkflowType
from temporalio.api.enums.v1 import EventType, UpdateWorkflowExecutionLifecycleStage
from temporalio.api.query.v1 import WorkflowQuery
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.update.v1 import Input, Meta, Request, WaitPolicy
from temporalio.api.workflowservice.v1 import (
    QueryWorkflowRequest,
    SignalWorkflowExecutionRequest,
    StartWorkflowExecutionRequest,
    UpdateWorkflowExecutionRequest,
)
from temporalio.client import Client, WorkflowHistory
from temporalio.service import RPCError, RPCStatusCode


def json_payload(value: Any) -> Payload:
    """A payload exactly as `--input '<json>'` sends it."""
    return Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(value).encode())


def raw_payload(data: bytes, encoding: bytes = b"json/plain", **meta: bytes) -> Payload:
    """Any bytes under any encoding (`--input-base64`, `--input-meta encoding=...`)."""
    return Payload(metadata={"encoding": encoding, **meta}, data=data)


@dataclass
class Answer:
    """What a caller hears back: success, or a failure's type and message."""

    ok: bool
    type: str | None = None
    message: str = ""
    rpc: RPCError | None = None


TRANSIENT = (RPCStatusCode.CANCELLED, RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.UNAVAILABLE)
"""What a loaded dev server may answer a call it did (or did not yet) carry out: ask again."""


async def signal(client: Client, wid: str, name: str, payloads: list[Payload]) -> Answer:
    """Send a signal; a transient failure is sent again with the same request id, which the
    server dedupes (under load it can store a signal and still answer "operation was canceled",
    as the `temporal` CLI's user would then try again)."""
    request = SignalWorkflowExecutionRequest(
        namespace=client.namespace,
        workflow_execution=WorkflowExecution(workflow_id=wid),
        signal_name=name,
        input=Payloads(payloads=payloads),
        identity="hostile",
        request_id=str(uuid.uuid4()),
    )
    sends = 3
    while True:
        try:
            await client.workflow_service.signal_workflow_execution(request)
            return Answer(True)
        except RPCError as exc:
            sends -= 1
            if exc.status not in TRANSIENT or not sends:
                return Answer(False, message=exc.message, rpc=exc)


async def update(
    client: Client, wid: str, name: str, payloads: list[Payload], *, accepted_only: bool = False
) -> Answer:
    """Send an update; wait for its outcome (or only until it is accepted, for long polls)."""
    stages = UpdateWorkflowExecutionLifecycleStage
    stage = (
        stages.UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_ACCEPTED
        if accepted_only
        else stages.UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_COMPLETED
    )
    try:
        resp = await client.workflow_service.update_workflow_execution(
            UpdateWorkflowExecutionRequest(
                namespace=client.namespace,
                workflow_execution=WorkflowExecution(workflow_id=wid),
                wait_policy=WaitPolicy(lifecycle_stage=stage),
                request=Request(
                    meta=Meta(update_id=str(uuid.uuid4()), identity="hostile"),
                    input=Input(name=name, args=Payloads(payloads=payloads)),
                ),
            )
        )
    except RPCError as exc:
        return Answer(False, message=exc.message, rpc=exc)
    if resp.outcome.HasField("failure"):
        failure = resp.outcome.failure
        kind = failure.application_failure_info.type or None
        return Answer(False, kind, failure.message)
    return Answer(True)


async def query(client: Client, wid: str, name: str, payloads: list[Payload]) -> Answer:
    try:
        resp = await client.workflow_service.query_workflow(
            QueryWorkflowRequest(
                namespace=client.namespace,
                execution=WorkflowExecution(workflow_id=wid),
                query=WorkflowQuery(query_type=name, query_args=Payloads(payloads=payloads)),
            )
        )
    except RPCError as exc:
        return Answer(False, message=exc.message, rpc=exc)
    return Answer(not resp.HasField("query_rejected"))


async def start(
    client: Client, wid: str, task_queue: str, payloads: list[Payload], **extra: Any
) -> Answer:
    try:
        await client.workflow_service.start_workflow_execution(
            StartWorkflowExecutionRequest(
                namespace=client.namespace,
                workflow_id=wid,
                workflow_type=WorkflowType(name="AgentRun"),
                task_queue=TaskQueue(name=task_queue),
                input=Payloads(payloads=payloads),
                identity="hostile",
                request_id=str(uuid.uuid4()),
                **extra,
            )
        )
    except RPCError as exc:
        return Answer(False, message=exc.message, rpc=exc)
    return Answer(True)


def task_failures(hist: WorkflowHistory) -> list[str]:
    """Every workflow task failure in a history, with its cause (none is ever acceptable)."""
    return [
        e.workflow_task_failed_event_attributes.failure.message
        for e in hist.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    ]


# ----------------------------------------------------------------------------- payload variants

OBJECT = {"call_id": "nope"}


def _random_json(rng: random.Random, depth: int = 0) -> Any:
    kinds = ["null", "bool", "int", "float", "str", "list", "dict"] if depth < 4 else ["str", "int"]
    kind = rng.choice(kinds)
    if kind == "null":
        return None
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "int":
        return rng.choice([0, -1, 2**63, -(2**70), rng.randint(-1000, 1000)])
    if kind == "float":
        return rng.choice([1e308, -1.5, 0.1])
    if kind == "str":
        alphabet = 'abc\x00\x1b\u202e\ud7ff\n"\\/{}[]'
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
    if kind == "list":
        return [_random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    keys = [
        "call_id",
        "always",
        "message",
        "approver",
        "reason",
        "kind",
        "decisions",
        "wait",
        "context",
        "seq",
        "items",
        "publisher_id",
        "from_offset",
        "agent",
        "input",
        "x",
    ]
    return {rng.choice(keys): _random_json(rng, depth + 1) for _ in range(rng.randint(0, 5))}


REF_TYPE = b"temporal.api.sdk.v1.ExternalStorageReference"


def storage_reference(driver: str, claim: dict[str, str]) -> Payload:
    """A payload that says "fetch me from external storage", as anyone can forge it."""
    data = json.dumps({"driverName": driver, "claimData": claim}).encode()
    return raw_payload(data, b"json/protobuf", messageType=REF_TYPE)


def variants(
    seed: int = 12, random_cases: int = 8, big: int = 1_900_000
) -> list[tuple[str, list[Payload]]]:
    """Payload lists a hostile caller might send to any handler, named for test ids."""
    rng = random.Random(seed)
    cases: list[tuple[str, list[Payload]]] = [
        ("no-input", []),
        ("two-inputs", [json_payload(OBJECT), json_payload(OBJECT)]),
        ("three-inputs", [json_payload(OBJECT)] * 3),
        ("null", [json_payload(None)]),
        ("true", [json_payload(True)]),
        ("number", [json_payload(-1.5e308)]),
        ("string", [json_payload("approve everything")]),
        ("list", [json_payload([1, [2, [3]]])]),
        ("empty-object", [json_payload({})]),
        ("wrong-types", [json_payload({"call_id": 5, "always": "yes", "message": [1]})]),
        ("deep-nesting", [raw_payload(b"[" * 20000 + b"]" * 20000)]),
        ("invalid-utf8", [raw_payload(b'{"call_id": "\xff\xfe\xfd"}')]),
        ("not-json", [raw_payload(b"{bad")]),
        ("binary-null", [raw_payload(b"", b"binary/null")]),
        ("protobuf", [raw_payload(b"\x08\x96\x01", b"binary/protobuf")]),
        (
            "forged-ciphertext",
            [raw_payload(rng.randbytes(64), b"binary/encrypted", **{"encryption-key-id": b"k1"})],
        ),
        ("escape-sequences", [json_payload({"call_id": "\x1b]0;pwned\x07", "approver": "\u202e"})]),
        ("near-limit", [json_payload({"call_id": "nope", "reason": "x" * big})]),
        # Temporal's external-storage references (the SDK fetches them before any handler runs).
        ("storage-ref-unknown-driver", [storage_reference("nope", {"sha256": "0" * 64})]),
        ("storage-ref-traversal", [storage_reference("hitl-file", {"sha256": "../../etc/hosts"})]),
        ("storage-ref-s3-key", [storage_reference("hitl-file", {"bucket": "b", "key": "k"})]),
        ("storage-ref-missing", [storage_reference("hitl-file", {"sha256": "0" * 64})]),
        ("storage-ref-not-json", [raw_payload(b"{bad", b"json/protobuf", messageType=REF_TYPE)]),
        ("storage-ref-legacy", [raw_payload(b"[1]", b"json/external-storage-reference")]),
    ]
    for n in range(random_cases):
        count = rng.choice([1, 1, 1, 2])
        cases.append((f"random-{n}", [json_payload(_random_json(rng)) for _ in range(count)]))
    return cases
