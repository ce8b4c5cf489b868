"""Upgrades keep working: a namespace registered by an earlier release keeps its inbox.

An earlier release registered fewer search attributes (no `HitlDeadline`, no `HitlOutcomes`).
Runs used to skip every attribute when one of the core set was missing, so the inbox went empty
after an upgrade with one log line. Now a run keeps the attributes the namespace has.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

from google.protobuf.duration_pb2 import Duration
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest, RegisterNamespaceRequest
from temporalio.client import Client
from temporalio.common import SearchAttributeKey
from temporalio.service import RPCError
from temporalio.worker import Worker

from hitl.admin import search_attribute_type
from hitl.client import data_converter
from hitl.wire import (
    SA_DEADLINE,
    SA_OUTCOMES,
    SA_PENDING_TOOLS,
    SA_STATUS,
    SEARCH_ATTRIBUTES,
    RunInput,
    RunOutput,
    RunStatus,
    WaitInput,
)
from hitl.worker.devserver import DevServer
from tests.agents import treasury_agent
from tests.helpers import queue_name, serving, wait_for
from tests.hostile import raw


async def old_release_namespace(dev_server: DevServer) -> Client:
    """A new namespace with the attributes an earlier release registered (no deadline, no
    outcomes), and a client of it."""
    ns = f"old-release-{uuid.uuid4().hex[:8]}"
    admin = await Client.connect(dev_server.address)
    await admin.workflow_service.register_namespace(
        RegisterNamespaceRequest(
            namespace=ns, workflow_execution_retention_period=Duration(seconds=86400)
        )
    )
    earlier = {
        name: search_attribute_type(kind)
        for name, kind in SEARCH_ATTRIBUTES.items()
        if name not in (SA_DEADLINE, SA_OUTCOMES)
    }

    async def registered() -> bool:
        try:
            await admin.workflow_service.describe_namespace(DescribeNamespaceRequest(namespace=ns))
            await admin.operator_service.add_search_attributes(
                AddSearchAttributesRequest(namespace=ns, search_attributes=earlier)
            )
        except RPCError:
            return False  # the new namespace is not in the server's cache yet
        return True

    await wait_for(registered, timeout=30, what=f"namespace {ns} with the earlier attributes")
    client = await Client.connect(dev_server.address, namespace=ns, data_converter=data_converter())
    # The history service learns a new namespace's attributes when it next refreshes its cache:
    # until then an upsert fails its workflow task ("no mapping defined", seen under load). A
    # probe run's upsert succeeds, its task retried, once the run under test's would.
    tq = queue_name("probe")
    async with Worker(client, task_queue=tq, workflows=[UpsertProbe]):
        await client.execute_workflow(
            UpsertProbe.run, id=f"{ns}-probe", task_queue=tq, execution_timeout=timedelta(minutes=2)
        )
    return client


@workflow.defn(sandboxed=False)
class UpsertProbe:
    """Upserts `HitlStatus` once: it completes when the namespace's attributes are usable."""

    @workflow.run
    async def run(self) -> None:
        workflow.upsert_search_attributes(
            [SearchAttributeKey.for_keyword(SA_STATUS).value_set("x")]
        )


async def test_a_namespace_from_an_earlier_release_keeps_the_attributes_it_has(
    dev_server: DevServer,
) -> None:
    client = await old_release_namespace(dev_server)
    async with serving(client, treasury_agent) as tq:
        handle = await client.start_workflow(
            "AgentRun",
            RunInput(agent=treasury_agent.name, input="release 900"),
            id=f"upgrade-{uuid.uuid4().hex[:8]}",
            task_queue=tq,
            result_type=RunOutput,
        )
        status: RunStatus = await handle.execute_update("wait", WaitInput(), result_type=RunStatus)
        assert status.phase == "awaiting_approval"
        assert status.pending[0].deadline is not None, "the call has a deadline to publish"

        # What the run upserted, as its history records it: the attributes the namespace has
        # (the old code upserted none here), and none it lacks (which would fail its tasks).
        upserted: set[str] = set()
        for event in (await handle.fetch_history()).events:
            if event.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
                fields = event.upsert_workflow_search_attributes_event_attributes
                upserted |= set(fields.search_attributes.indexed_fields)
        assert {SA_STATUS, SA_PENDING_TOOLS}.issubset(upserted), upserted
        assert not upserted & {SA_DEADLINE, SA_OUTCOMES}, upserted
        assert raw.task_failures(await handle.fetch_history()) == []
        await handle.terminate("test over")
