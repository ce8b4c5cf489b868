"""`hitl doctor` against the dev server: a healthy namespace, and one set up by hand with an
attribute missing, no worker, and runs encrypted with a key this machine may lack."""

from __future__ import annotations

import asyncio
import base64
import os
import sys
import uuid
from datetime import timedelta

from google.protobuf.duration_pb2 import Duration
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.api.workflowservice.v1 import (
    DescribeNamespaceRequest,
    ListWorkflowExecutionsRequest,
    RegisterNamespaceRequest,
)
from temporalio.client import Client
from temporalio.service import RPCError

from hitl.admin import search_attribute_type
from hitl.client import data_converter
from hitl.codec import EncryptionCodec
from hitl.wire import SA_DEADLINE, SA_OUTCOMES, SEARCH_ATTRIBUTES, WORKFLOW_TYPE
from hitl.worker.devserver import DevServer
from tests.agents import support_agent
from tests.helpers import ROOT, queue_name, serving, wait_for


async def doctor(address: str, *args: str, **env: str) -> tuple[int, list[str]]:
    """`hitl --address ADDRESS ARGS doctor`: exit code and lines (this machine's HITL_* and
    TEMPORAL_* settings left out, `env` added). Run without blocking the test's worker."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("HITL_", "TEMPORAL_"))}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "hitl.cli",
        "--address",
        address,
        *args,
        cwd=ROOT,
        env={**clean, **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert not err, err.decode()
    assert proc.returncode is not None
    return proc.returncode, out.decode().splitlines()


def line(lines: list[str], level: str, *words: str) -> str:
    """The one line of the report at `level` that holds every word."""
    [found] = [x for x in lines if x.split()[0] == level and all(w in x for w in words)]
    return found


async def test_a_healthy_namespace_is_all_ok(dev_server: DevServer, dev_client: Client) -> None:
    """The session's dev server (our attributes registered) with a worker on the queue asked
    about: every attribute and that queue's workers are ok, and the exit code is 0."""
    async with serving(dev_client, support_agent) as tq:
        code, lines = await doctor(dev_server.address, "--task-queue", tq, "doctor")
    assert code == 0, lines
    assert line(lines, "ok", "server", "Temporal", "namespace 'default'")
    for name, kind in SEARCH_ATTRIBUTES.items():
        assert line(lines, "ok", "search attribute", f"{name} ({kind})")
    assert line(lines, "ok", "workers", f"queue {tq!r}: 1 workflow poller(s), 1 activity")
    for topic in ("encryption", "blob store", "ledger key", "approvers", "signing key"):
        # (encryption: this machine's key, and how the latest runs, if any, were encrypted)
        assert [x for x in lines if x.split()[0] == "ok" and f" {topic} " in x], topic
    assert lines[-1].startswith("0 failed")


async def test_a_missing_attribute_no_worker_and_a_foreign_key(dev_server: DevServer) -> None:
    """A namespace whose attributes were registered by hand, one missing and one of the wrong
    type, with nobody polling the queue, and a run encrypted with key `k1`: each shows with
    its fix, and the exit code is 1. With the key, the encryption line is ok."""
    ns = f"doctor-{uuid.uuid4().hex[:8]}"
    admin = await Client.connect(dev_server.address)
    await admin.workflow_service.register_namespace(
        RegisterNamespaceRequest(
            namespace=ns, workflow_execution_retention_period=Duration(seconds=86400)
        )
    )
    wanted = {
        name: search_attribute_type(kind)
        for name, kind in SEARCH_ATTRIBUTES.items()
        if name != SA_DEADLINE
    }
    wanted[SA_OUTCOMES] = IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD  # not a KeywordList

    async def registered() -> bool:
        try:
            await admin.workflow_service.describe_namespace(DescribeNamespaceRequest(namespace=ns))
            await admin.operator_service.add_search_attributes(
                AddSearchAttributesRequest(namespace=ns, search_attributes=wanted)
            )
        except RPCError:
            return False  # the new namespace is not in the server's cache yet
        return True

    await wait_for(registered, timeout=30, what=f"namespace {ns} with attributes")
    key = base64.b64encode(b"k" * 32).decode()
    codec = EncryptionCodec("k1", {"k1": base64.b64decode(key)})
    client = await Client.connect(
        dev_server.address, namespace=ns, data_converter=data_converter(codec=codec)
    )
    tq = queue_name("doctor")
    handle = await client.start_workflow(
        WORKFLOW_TYPE,
        {"agent": "Support agent", "input": "cancel order 1"},
        id=f"doctor-{uuid.uuid4().hex[:8]}",
        task_queue=tq,
        execution_timeout=timedelta(minutes=5),
    )

    async def listed() -> bool:
        found = await client.workflow_service.list_workflow_executions(
            ListWorkflowExecutionsRequest(namespace=ns, query=f"WorkflowType = '{WORKFLOW_TYPE}'")
        )
        return bool(found.executions)

    await wait_for(listed, timeout=30, what="the run in visibility")
    try:
        args = ("--namespace", ns, "doctor", "--task-queue", tq)
        code, lines = await doctor(dev_server.address, *args)
        assert code == 1, lines
        assert line(lines, "ok", "server", f"namespace {ns!r}")
        assert line(lines, "ok", "search attribute", "HitlStatus (Keyword)")
        assert "(fix: hitl setup)" in line(
            lines, "fail", "search attribute", SA_DEADLINE, "missing"
        )
        wrong = line(
            lines, "warn", "search attribute", SA_OUTCOMES, "KEYWORD, runs need KeywordList"
        )
        assert f"search-attribute remove --name {SA_OUTCOMES}, then hitl setup" in wrong
        no_worker = line(lines, "warn", "workers", f"queue {tq!r}: no worker")
        assert f"--task-queue {tq})" in no_worker
        assert "set HITL_ENCRYPTION_KEY" in line(lines, "fail", "encryption", "key 'k1'")
        assert lines[-1].startswith("2 failed")

        code, lines = await doctor(dev_server.address, *args, HITL_ENCRYPTION_KEY=f"k1:{key}")
        assert line(lines, "ok", "encryption", "encrypting with 'k1'")
        assert line(lines, "ok", "encryption", "latest runs are encrypted with 'k1'")
        assert code == 1  # the attribute is still missing
    finally:
        await handle.terminate("test over")
