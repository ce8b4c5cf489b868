"""What a limit ledger's history says: every run of its chain, the requests it accepted and
what it answered (the proof the ledger tests check, rather than what clients were told)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory

from hitl.wire import LEDGER_RESERVE, ReserveAnswer, ReserveInput

ACCEPTED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
COMPLETED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED


async def chain(client: Client, workflow_id: str) -> list[WorkflowHistory]:
    """Every run of a workflow's continue-as-new chain, oldest first."""
    runs: list[WorkflowHistory] = []
    run_id = ""
    while True:
        hist = await client.get_workflow_handle(workflow_id, run_id=run_id or None).fetch_history()
        runs.insert(0, hist)
        started = hist.events[0].workflow_execution_started_event_attributes
        run_id = started.continued_execution_run_id
        if not run_id:
            return runs


@dataclass
class Reservations:
    """The reservations a ledger chain accepted, in order, with the answers it gave."""

    accepted: list[ReserveInput] = field(default_factory=list)
    answers: dict[str, ReserveAnswer] = field(default_factory=dict)
    """By protocol instance (update) id."""
    update_ids: list[str] = field(default_factory=list)

    def accepted_per_reservation(self) -> Counter[str]:
        return Counter(r.reservation_id for r in self.accepted)


async def reservations(client: Client, workflow_id: str) -> Reservations:
    """The `reserve` updates the ledger's histories accepted and answered."""
    conv = client.data_converter.payload_converter
    out = Reservations()
    for hist in await chain(client, workflow_id):
        for event in hist.events:
            if event.event_type == ACCEPTED:
                attrs = event.workflow_execution_update_accepted_event_attributes
                if attrs.accepted_request.input.name != LEDGER_RESERVE:
                    continue
                [req] = conv.from_payloads(attrs.accepted_request.input.args.payloads)
                out.accepted.append(ReserveInput.model_validate(req))
                out.update_ids.append(attrs.protocol_instance_id)
            elif event.event_type == COMPLETED:
                attrs2 = event.workflow_execution_update_completed_event_attributes
                if attrs2.meta.update_id not in out.update_ids:
                    continue
                [answer] = conv.from_payloads(attrs2.outcome.success.payloads)
                out.answers[attrs2.meta.update_id] = ReserveAnswer.model_validate(answer)
    return out
