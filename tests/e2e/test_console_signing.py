"""The console as the approval gateway (dev server): a run that requires signed decisions
accepts the console's decisions, signed with its gateway key for the signed-in person and bound
to the arguments the person saw, and refuses the same decision sent unsigned; the person must
still be allowed to decide, and a decision bound to other arguments is refused."""

from __future__ import annotations

from temporalio.client import Client, WorkflowUpdateFailedError

from hitl import Runner
from hitl.console.data import ConsoleData
from hitl.signing import key_id_for, new_key_pair
from hitl.wire import ApproverDirectory, ApproverEntry, DecisionInput, RunOutput, RunStatus
from hitl.wire.runs import text_digest
from tests.agents import signed_treasury
from tests.helpers import serving


async def test_a_signed_run_takes_decisions_through_the_console_only(dev_client: Client) -> None:
    key, public = new_key_pair()
    kid = key_id_for(public)
    directory = ApproverDirectory(
        approvers={
            "ann": ApproverEntry(groups=["finance"]),  # no key of her own: she uses the console
            "console": ApproverEntry(gateway=True, keys={kid: public}),
        }
    )
    console = ConsoleData({dev_client.namespace: dev_client}, signing=(kid, key))
    async with serving(dev_client, signed_treasury, directory=directory) as tq:
        result = await Runner.run(
            signed_treasury, "pay 500", client=dev_client, task_queue=tq, serve=False
        )
        [item] = result.interruptions
        handle = dev_client.get_workflow_handle(result.workflow_id, result_type=RunOutput)
        # Sent around the console (unsigned): refused, typed, nothing recorded.
        try:
            await handle.execute_update(
                "approve", DecisionInput(call_id=item.call_id, approver="ann")
            )
            raise AssertionError("an unsigned decision was accepted")
        except WorkflowUpdateFailedError as err:
            assert getattr(err.cause, "type", None) == "Unsigned"
        ns, wid = dev_client.namespace, result.workflow_id
        [pending] = (await handle.query("status", result_type=RunStatus)).pending
        seen = pending.arguments_sha256
        assert seen == text_digest(pending.arguments)
        # Through the console, for someone outside finance: signed, but not allowed.
        refused = await console.decide(
            ns, wid, item.call_id, "mallory", "approve", seen_sha256=seen
        )
        assert (refused.ok, refused.error_type) == (False, "NotAuthorized")
        assert refused.headline == "You are not allowed to decide this call"
        # Signed for ann, but for arguments she did not see: the run refuses it.
        other = text_digest('{"supplier":"ACME","amount":5}')
        stale = await console.decide(ns, wid, item.call_id, "ann", "approve", seen_sha256=other)
        assert (stale.ok, stale.error_type) == (False, "ArgumentsChanged")
        assert stale.headline == "This call changed since you opened it: look again"
        # Through the console, for ann: signed for her with the gateway's key, accepted.
        done = await console.decide(ns, wid, item.call_id, "ann", "approve", seen_sha256=seen)
        assert done.ok, (done.headline, done.detail)
        assert done.headline == "Approved by ann via console (signed)"
        out = await handle.result()
    [d] = out.decisions
    assert (d.approver, d.verified, d.key_id, d.client) == ("ann", True, kid, "console")
    assert d.arguments_sha256 == seen
    assert out.final_output == "Paid ACME $500"
