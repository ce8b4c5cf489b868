"""Checks that mutation testing found unguarded, each asserted on its own (no server).

Each test fails when the check it names is taken out of the code:

- a run's `RunConfig(signed_decisions=True)` (`ApprovalBook.signed_run`; taking it out of
  `needs_signature` alone changes nothing, since `ApprovalBook.signed` checks it again for every
  call that has a target: this test fails when the run's setting is ignored in both);
- an expired call's own state (`call.state = "expired"` in `ApprovalBook.expire`; seen from a
  run, `workflows/calls.py` sets the state again in the same workflow task, so the book's own
  contract is what this guards);
- a blob claim matched as a whole digest, not a prefix (`_DIGEST.fullmatch` in `hitl.storage`);
- a store's own error, whatever its type, read as a stand-in (`BlobStore._read`);
- a webhook signature that covers its timestamp, and the freshness window (`verify_webhook`),
  each alone, so that one cannot hide the other.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from temporalio.converter import StorageDriverClaim
from temporalio.exceptions import ApplicationError

from hitl.notify import signature_header, verify_webhook
from hitl.storage import UNRETRIEVABLE, BlobStore, FileBlobStore
from hitl.wire import (
    AgentGraph,
    AgentSpec,
    CallRecord,
    CarriedState,
    DecisionInput,
    ModelSpec,
    ToolSpec,
)
from hitl.workflows.book import ApprovalBook

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


def _book(signed_run: bool) -> ApprovalBook:
    tool = ToolSpec(name="pay", approval="always")  # the tool itself takes unsigned decisions
    agent = AgentSpec(id="desk", name="Desk", model=ModelSpec(name="m"), tools=[tool])
    state = CarriedState(graph=AgentGraph(root="desk", agents={"desk": agent}, fingerprint="f"))
    book = ApprovalBook(state, signed_run=signed_run)
    book.begin_turn(
        [
            CallRecord(
                call_id="t1.1",
                tool_name="pay",
                agent_id="desk",
                agent_name="Desk",
                arguments="{}",
                turn=1,
                state="awaiting_approval",
                needs_approval=True,
                requested_at=NOW,
                deadline=NOW + timedelta(hours=1),
            )
        ]
    )
    return book


def test_a_run_that_takes_only_signed_decisions_refuses_an_unsigned_one() -> None:
    """`RunConfig(signed_decisions=True)` on a tool that does not ask for signatures itself."""
    d = DecisionInput(call_id="t1.1", approver="ann")
    book = _book(signed_run=True)
    assert book.check("approve", d, NOW) is None  # nothing else is wrong with it
    with pytest.raises(ApplicationError) as err:
        book.verify("approve", d, now=NOW, workflow_id="w")
    assert err.value.type == "Unsigned"
    assert book.needs_signature("t1.1")
    assert [p.signed_decisions for p in book.pending()] == [True], "what people are shown"
    # The same call in a run without the setting takes it.
    assert _book(signed_run=False).verify("approve", d, now=NOW, workflow_id="w") is False


def test_an_expired_call_is_expired_not_rejected() -> None:
    book = _book(signed_run=False)
    call = book.calls["t1.1"]
    rec = book.expire(call, NOW + timedelta(hours=2), "expired after 3600s")
    assert call.state == "expired"
    assert (rec.kind, rec.source, rec.expired) == ("expired", "deadline", True)
    assert book.pending() == []


# ----------------------------------------------------------------------------- blob claims


class Spy(FileBlobStore):
    """A file store that notes every read."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.reads: list[str] = []

    async def get(self, digest: str) -> bytes | None:
        self.reads.append(digest)
        return await super().get(digest)


async def test_a_claim_that_starts_with_a_digest_reads_nothing(tmp_path: Path) -> None:
    """`<digest>/../..` names a path outside the store: refused whole, before any read."""
    digest = "0" * 64
    (tmp_path / "secret.txt").write_text("do not read")
    store = Spy(tmp_path / "blobs")
    # The directories the path walks through exist, so a read would reach the secret.
    (tmp_path / "blobs" / digest[:2] / digest).mkdir(parents=True)
    claim = StorageDriverClaim(claim_data={"sha256": f"{digest}/../../../secret.txt"})
    assert (tmp_path / "blobs" / digest[:2] / claim.claim_data["sha256"]).read_text()
    [back] = await store.retrieve(None, [claim])  # type: ignore[arg-type]
    assert back.metadata["encoding"] == UNRETRIEVABLE
    assert b"malformed" in back.metadata["reason"]
    assert store.reads == [], "nothing was read for it"


class Broken(BlobStore):
    """A store whose client fails with something other than an OSError."""

    def name(self) -> str:
        return "broken"

    def where(self) -> str:
        return "broken://"

    async def put(self, digest: str, data: bytes) -> None:
        raise RuntimeError("the client library is confused")

    async def get(self, digest: str) -> bytes | None:
        raise RuntimeError("the client library is confused")


async def test_any_store_error_is_a_stand_in_not_an_exception() -> None:
    claim = StorageDriverClaim(claim_data={"sha256": "1" * 64})
    [back] = await Broken().retrieve(None, [claim])  # type: ignore[arg-type]
    assert back.metadata["encoding"] == UNRETRIEVABLE
    assert b"RuntimeError" in back.metadata["reason"]


# ----------------------------------------------------------------------------- webhooks

SECRET = "s3cret"
BODY = b'{"event":"decided","call_id":"t1.1"}'


def test_a_webhook_signature_covers_its_timestamp() -> None:
    """A body signed an hour ago, sent again with a fresh timestamp (the old signature): the
    timestamp is fresh, so only the signature can tell."""
    now = time.time()
    old = str(int(now - 3600))
    signature = signature_header(SECRET, old, BODY)
    assert verify_webhook(BODY, old, signature, SECRET, now=now - 3600)  # as it was sent
    assert not verify_webhook(BODY, str(int(now)), signature, SECRET, now=now)


def test_a_stale_webhook_is_refused_though_correctly_signed() -> None:
    now = time.time()
    stale = str(int(now - 3600))
    signature = signature_header(SECRET, stale, BODY)  # a correct signature for that time
    assert not verify_webhook(BODY, stale, signature, SECRET, now=now)
    fresh = str(int(now - 10))
    assert verify_webhook(BODY, fresh, signature_header(SECRET, fresh, BODY), SECRET, now=now)
