"""Blob stores for external storage: content addressing, and claims treated as hostile."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.converter import StorageDriverClaim, StorageDriverStoreContext

from hitl import StoredPayloadMissing, UserError
from hitl.client import data_converter
from hitl.storage import (
    UNRETRIEVABLE,
    FileBlobStore,
    S3BlobStore,
    external_storage,
    storage_from_env,
    store_from_url,
)

STORE = StorageDriverStoreContext()


def payload(text: str) -> Payload:
    return Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(text).encode())


async def test_a_blob_is_stored_under_its_digest_and_read_back(tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path)
    p = payload("x" * 5000)
    [claim] = await store.store(STORE, [p])
    digest = hashlib.sha256(p.SerializeToString(deterministic=True)).hexdigest()
    assert dict(claim.claim_data) == {"sha256": digest}
    assert (tmp_path / digest[:2] / digest).is_file()
    [again] = await store.store(STORE, [p])
    assert again == claim, "the same content is the same blob"
    [back] = await store.retrieve(None, [claim])  # type: ignore[arg-type]
    assert back == p


@pytest.mark.parametrize(
    ("claim", "why"),
    [
        ({"sha256": "../../etc/hosts"}, "malformed"),
        ({"sha256": "A" * 64}, "malformed"),
        ({"sha256": "0" * 64, "path": "/etc/hosts"}, "malformed"),
        ({"bucket": "other", "key": "secrets.txt"}, "malformed"),
        ({}, "malformed"),
        ({"sha256": "0" * 64}, "no stored payload"),
    ],
)
async def test_a_claim_never_reads_outside_the_store(
    tmp_path: Path, claim: dict[str, str], why: str
) -> None:
    (tmp_path / "secret.txt").write_text("do not read")
    store = FileBlobStore(tmp_path / "blobs")
    [back] = await store.retrieve(None, [StorageDriverClaim(claim_data=claim)])  # type: ignore[arg-type]
    assert back.metadata["encoding"] == UNRETRIEVABLE
    assert why in back.metadata["reason"].decode()


async def test_an_altered_blob_is_refused(tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path)
    [claim] = await store.store(STORE, [payload("approve 100")])
    digest = claim.claim_data["sha256"]
    (tmp_path / digest[:2] / digest).write_bytes(payload("approve 1000000").SerializeToString())
    [back] = await store.retrieve(None, [claim])  # type: ignore[arg-type]
    assert back.metadata["encoding"] == UNRETRIEVABLE
    assert b"altered" in back.metadata["reason"]


class MemoryS3:
    """The `S3StorageDriverClient` surface over a dict (the wire protocol is the SDK's)."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], bytes] = {}

    async def put_object(self, *, bucket: str, key: str, data: bytes) -> None:
        self.objects[(bucket, key)] = data

    async def object_exists(self, *, bucket: str, key: str) -> bool:
        return (bucket, key) in self.objects

    async def get_object(self, *, bucket: str, key: str) -> bytes:
        return self.objects[(bucket, key)]


async def test_s3_keys_come_from_the_workers_bucket_and_prefix_only() -> None:
    s3 = MemoryS3()
    s3.objects[("secrets", "db-password")] = b"hunter2"
    store = S3BlobStore(s3, "payloads", "/hitl/prod/")
    [claim] = await store.store(STORE, [payload("big")])
    [(bucket, key)] = s3.objects.keys() - {("secrets", "db-password")}
    assert (bucket, key) == ("payloads", f"hitl/prod/sha256/{claim.claim_data['sha256']}")
    [back] = await store.retrieve(None, [claim])  # type: ignore[arg-type]
    assert back == payload("big")
    forged = StorageDriverClaim(claim_data={"bucket": "secrets", "key": "db-password"})
    [refused] = await store.retrieve(None, [forged])  # type: ignore[arg-type]
    assert refused.metadata["encoding"] == UNRETRIEVABLE


def test_configuration_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HITL_STORAGE", raising=False)
    assert storage_from_env() is None
    monkeypatch.setenv("HITL_STORAGE", (tmp_path / "b").as_uri())
    monkeypatch.setenv("HITL_STORAGE_THRESHOLD", "4096")
    storage = storage_from_env()
    assert storage is not None and storage.payload_size_threshold == 4096
    [store] = storage.drivers
    assert isinstance(store, FileBlobStore) and store.root == tmp_path / "b"
    monkeypatch.setenv("HITL_STORAGE_THRESHOLD", "lots")
    with pytest.raises(UserError, match="number of bytes"):
        storage_from_env()
    with pytest.raises(UserError, match="file:///dir or s3://bucket/prefix"):
        store_from_url("ftp://example.com/x")
    with pytest.raises(UserError, match="no bucket"):
        store_from_url("s3:///prefix")


async def test_a_typed_read_of_a_missing_blob_is_a_typed_error(tmp_path: Path) -> None:
    conv = data_converter(codec=None, storage=external_storage(FileBlobStore(tmp_path), 1024))
    [ref] = await conv.encode(["y" * 4000])
    assert ref.metadata.get("messageType") == b"temporal.api.sdk.v1.ExternalStorageReference"
    assert await conv.decode([ref], [str]) == ["y" * 4000]
    for blob in tmp_path.rglob("*"):
        if blob.is_file():
            blob.unlink()
    with pytest.raises(StoredPayloadMissing, match="no stored payload"):
        await conv.decode([ref], [str])
    # A process without a store reads the reference as missing too, typed, not a RuntimeError.
    with pytest.raises(StoredPayloadMissing, match="no store is configured"):
        await data_converter(codec=None).decode([ref], [str])
