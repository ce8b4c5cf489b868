"""`PolicyRegistry`: a namespace's approval policy, published by admins with signed updates.

One long-lived workflow (`POLICY_REGISTRY_ID`) holds the current policy and the log of who
published which version when (served by workers built with `policy_registry=True`). Runs do not
pin from it yet: a run's policy is still its worker's file (docs/policies.md, "Not built
yet"). The registry reads the worker's approver directory once when it
starts (an activity): a publication counts only if a key that directory gives a member of group
`admins` signed exactly that document for this registry (`hitl.policy_signing`). Validators
refuse everything else before it reaches history: an unsigned or non-admin publication, a
document that does not validate, a malformed payload.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from hitl.policy import PolicyError, canonical, digest_of, from_data
    from hitl.policy.loading import MAX_DOCUMENT_BYTES
    from hitl.policy_signing import DOMAIN, verify_publication
    from hitl.signing import SignatureError
    from hitl.wire import (
        ACT_REGISTRY_DIRECTORY,
        POLICY_REGISTRY_TYPE,
        QUERY_CURRENT_POLICY,
        UPDATE_PUBLISH_POLICY,
        ApproverDirectory,
        CurrentPolicy,
        PinnedPolicy,
        PolicyPublication,
        PublishPolicy,
        RegistryInput,
        RegistryState,
    )
    from hitl.workflows.inputs import read_one, refusal

MAX_LOG_KEPT = 200
CONTINUE_AFTER = 500
"""Publications (accepted or not) before the registry continues as new."""
PUBLISH_EXAMPLE = '{"document": {...}, "admin": "...", "key_id": "...", "signature": "..."}'


@workflow.defn(name=POLICY_REGISTRY_TYPE)
class PolicyRegistry:
    """The current policy of a namespace and who published it."""

    @workflow.init
    def __init__(self, *args: Any) -> None:
        try:
            inp = read_one(
                args,
                RegistryInput,
                what="the registry input",
                example="{}",
                max_bytes=4 * MAX_DOCUMENT_BYTES,
                error_type="UserError",
                optional=True,
            )
        except ApplicationError:
            inp = RegistryInput()
        # Carried state is believed only from a continuation of this registry.
        carried = inp.state if workflow.info().continued_run_id is not None else None
        self.state = carried or RegistryState()
        self.updates = 0

    @workflow.run
    async def run(self, *args: Any) -> None:
        """Hold the policy until continuing as new; read the directory first."""
        if self.state.directory is None:
            self.state.directory = await workflow.execute_activity(
                ACT_REGISTRY_DIRECTORY,
                result_type=ApproverDirectory,
                start_to_close_timeout=timedelta(seconds=30),
            )
            # A command in the task that stored it. Without one, a worker replaying from the
            # start (no cache, or after an eviction) was handed the directory and the next
            # update in one activation, and the SDK validates updates before `run` resumes:
            # the validator never saw the directory (and refuses without it, below).
            workflow.upsert_memo({"hitl_registry": {"directory_read": True}})
        await workflow.wait_condition(
            lambda: self.updates >= CONTINUE_AFTER or workflow.info().is_continue_as_new_suggested()
        )
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(RegistryInput(state=self.state))

    @workflow.update(name=UPDATE_PUBLISH_POLICY)
    async def publish(self, *args: Any) -> PolicyPublication:
        """Make a signed document the current policy (validated first).

        The validator checks everything and refuses a publication that arrives before the
        registry has its directory (`RegistryNotReady`); the handler checks again (in a replay,
        where validators do not run, after waiting for the directory).
        """
        await workflow.wait_condition(lambda: self.state.directory is not None)
        p, doc_pin = self._checked(args)
        self.updates += 1
        self.state.current = doc_pin
        entry = PolicyPublication(
            name=doc_pin.name,
            version=doc_pin.version,
            digest=doc_pin.digest,
            admin=p.admin,
            at=workflow.now(),
            reason=p.reason,
        )
        self.state.log = [*self.state.log, entry][-MAX_LOG_KEPT:]
        return entry

    @publish.validator
    def _validate(self, *args: Any) -> None:
        if self.state.directory is None:
            raise ApplicationError(
                "the registry has not read its approver directory yet: publish again shortly",
                type="RegistryNotReady",
            )
        self._checked(args)

    def _checked(self, args: tuple[Any, ...]) -> tuple[PublishPolicy, PinnedPolicy]:
        p = read_one(
            args,
            PublishPolicy,
            what="a policy publication",
            example=PUBLISH_EXAMPLE,
            max_bytes=MAX_DOCUMENT_BYTES * 2,
            error_type="InvalidPublication",
        )
        pinned = document_pin(p.document, "the published policy")
        directory = self.state.directory
        if directory is None:  # (the validator refused it; a replay waits for it)
            raise ApplicationError(
                "the registry has no approver directory", type="RegistryNotReady"
            )
        check_signature(directory, p, pinned.digest)
        return p, pinned

    @workflow.query(name=QUERY_CURRENT_POLICY)
    def current(self) -> CurrentPolicy:
        """The current policy (with its document) and the publication log."""
        return CurrentPolicy(
            policy=self.state.current, log=self.state.log, ready=self.state.directory is not None
        )


def document_pin(document: dict[str, Any], source: str) -> PinnedPolicy:
    """A published or applied document, validated, as runs pin it (else `PolicyError`)."""
    try:
        doc = from_data(document, source=source)
    except PolicyError as exc:
        raise refusal("PolicyError", str(exc)) from None
    return PinnedPolicy(
        name=doc.policy, version=doc.version, digest=digest_of(doc), document=canonical(doc)
    )


def check_signature(
    directory: ApproverDirectory, p: PublishPolicy, digest: str, domain: bytes = DOMAIN
) -> None:
    """Refuse `p` unless an admin of `directory` signed document `digest` for this workflow.

    The refusals are `hitl.policy_signing.verify_publication`'s, checked at the run's clock.
    """
    try:
        verify_publication(
            directory,
            p,
            registry_id=workflow.info().workflow_id,
            digest=digest,
            now=workflow.now(),
            domain=domain,
        )
    except SignatureError as exc:
        raise refusal(exc.type, exc.message) from None
