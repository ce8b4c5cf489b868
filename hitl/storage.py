"""Large payloads by reference: tool outputs, model outputs and arguments kept out of history.

Temporal's external storage (`temporalio.converter.ExternalStorage`, the claim-check pattern)
swaps every payload over a threshold for a small reference before it reaches the server, and
back when it is read. `hitl` adds content-addressed blob stores for it:

- `FileBlobStore`: a directory (the embedded default: `hitl dev` keeps it in its state dir);
- `S3BlobStore`: any S3-compatible bucket, through the SDK's `S3StorageDriverClient`.

Configure with `HITL_STORAGE` (`file:///var/lib/hitl/blobs`, `s3://bucket/prefix`) and
`HITL_STORAGE_THRESHOLD` (bytes, default 256 KiB), on workers and on clients alike: whoever
reads a run's payloads needs its store. The codec encrypts before a payload is stored, so
blobs are ciphertext when encryption is on.

A reference is as hostile as any payload: anyone with namespace access can send one. So a
claim is only a SHA-256 digest (never a path, bucket or key), what is read must hash to it,
and nothing here raises while a workflow task decodes: a claim that is malformed, missing
or altered comes back as an `UNRETRIEVABLE` payload saying why, which the run's handlers
refuse like any bad payload and typed reads turn into `StoredPayloadMissing`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import re
import tempfile
from abc import abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    ExternalStorage,
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)
from typing_extensions import override

from hitl.errors import UserError
from hitl.extras import missing_extra
from hitl.markers import UNRETRIEVABLE as UNRETRIEVABLE  # also public here

log = logging.getLogger("hitl")

DEFAULT_THRESHOLD = 256 * 1024
"""Payloads at least this large (bytes, after encryption) are stored by reference."""

_DIGEST = re.compile(r"[0-9a-f]{64}")


def unretrievable(reason: str) -> Payload:
    """The stand-in for a stored payload that could not be read."""
    return Payload(metadata={"encoding": UNRETRIEVABLE, "reason": reason.encode()}, data=b"")


class BlobStore(StorageDriver):
    """A content-addressed store of payloads: the claim is the SHA-256 of the stored bytes."""

    @abstractmethod
    async def put(self, digest: str, data: bytes) -> None:
        """Store `data` under `digest` (idempotent: the same digest is the same bytes)."""

    @abstractmethod
    async def get(self, digest: str) -> bytes | None:
        """The bytes stored under `digest`, or `None` when there are none."""

    @abstractmethod
    def where(self) -> str:
        """Where blobs live, for messages (`file:///...`, `s3://...`)."""

    async def aclose(self) -> None:
        """Release connections (the process is done with the store)."""

    @override
    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        claims = []
        for payload in payloads:
            data = payload.SerializeToString(deterministic=True)
            digest = hashlib.sha256(data).hexdigest()
            await self.put(digest, data)
            claims.append(StorageDriverClaim(claim_data={"sha256": digest}))
        return claims

    @override
    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        return [await self._read(claim) for claim in claims]

    async def _read(self, claim: StorageDriverClaim) -> Payload:
        try:
            digest = claim.claim_data.get("sha256", "")
            if set(claim.claim_data) != {"sha256"} or not _DIGEST.fullmatch(digest):
                return unretrievable("malformed storage reference (expected only a sha256)")
            data = await self.get(digest)
            if data is None:
                return unretrievable(f"no stored payload sha256:{digest} in {self.where()}")
            if hashlib.sha256(data).hexdigest() != digest:
                return unretrievable(f"stored payload sha256:{digest} was altered")
            payload = Payload()
            payload.ParseFromString(data)
            return payload
        except Exception as exc:  # never fail the workflow task that reads it
            log.warning("stored payload unreadable: %s", exc)
            return unretrievable(f"stored payload unreadable: {type(exc).__name__}")


class FileBlobStore(BlobStore):
    """Blobs in a local directory, `root/ab/abcdef...` (written atomically)."""

    def __init__(self, root: str | os.PathLike[str], name: str = "hitl-file") -> None:
        self.root = Path(root)
        self._name = name

    @override
    def name(self) -> str:
        return self._name

    @override
    def where(self) -> str:
        return self.root.absolute().as_uri()

    def _path(self, digest: str) -> Path:
        return self.root / digest[:2] / digest

    @override
    async def put(self, digest: str, data: bytes) -> None:
        await asyncio.to_thread(self._put, digest, data)

    def _put(self, digest: str, data: bytes) -> None:
        path = self._path(digest)
        if path.exists():
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    @override
    async def get(self, digest: str) -> bytes | None:
        try:
            return await asyncio.to_thread(self._path(digest).read_bytes)
        except FileNotFoundError:
            return None


class S3BlobStore(BlobStore):
    """Blobs in an S3-compatible bucket under `prefix + "sha256/" + digest`.

    `client` is the SDK's `S3StorageDriverClient` (e.g. `new_aioboto3_client(...)` from
    `temporalio.contrib.aws.s3driver.aioboto3`). The bucket and prefix are the worker's own:
    a reference names neither, so no payload can point a worker at another object.
    """

    def __init__(self, client: Any, bucket: str, prefix: str = "", name: str = "hitl-s3"):
        self.client: Any = client
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self._name = name

    @override
    def name(self) -> str:
        return self._name

    @override
    def where(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def _key(self, digest: str) -> str:
        return f"{self.prefix}sha256/{digest}"

    @override
    async def put(self, digest: str, data: bytes) -> None:
        key = self._key(digest)
        if not await self.client.object_exists(bucket=self.bucket, key=key):
            await self.client.put_object(bucket=self.bucket, key=key, data=data)

    @override
    async def aclose(self) -> None:
        close = getattr(self.client, "aclose", None)
        if close is not None:
            await close()

    @override
    async def get(self, digest: str) -> bytes | None:
        key = self._key(digest)
        if not await self.client.object_exists(bucket=self.bucket, key=key):
            return None
        data: bytes = await self.client.get_object(bucket=self.bucket, key=key)
        return data


async def close_storage(client: object) -> None:
    """Release the connections of a client's blob stores (workers call it as they stop)."""
    converter = getattr(client, "data_converter", None)
    storage = getattr(converter, "external_storage", None)
    for driver in getattr(storage, "drivers", ()):
        if isinstance(driver, BlobStore):
            await driver.aclose()


def external_storage(store: BlobStore, threshold: int = DEFAULT_THRESHOLD) -> ExternalStorage:
    """The SDK's external storage over one of our stores."""
    return ExternalStorage(drivers=[store], payload_size_threshold=threshold)


def storage_from_env() -> ExternalStorage | None:
    """`HITL_STORAGE` / `HITL_STORAGE_THRESHOLD` as external storage (`None` when unset)."""
    url = os.environ.get("HITL_STORAGE", "").strip()
    if not url:
        return None
    raw = os.environ.get("HITL_STORAGE_THRESHOLD", "").strip()
    try:
        threshold = int(raw) if raw else DEFAULT_THRESHOLD
    except ValueError:
        raise UserError(f"HITL_STORAGE_THRESHOLD must be a number of bytes, not {raw!r}") from None
    if threshold < 1024:
        raise UserError("HITL_STORAGE_THRESHOLD must be at least 1024 bytes")
    return external_storage(store_from_url(url), threshold)


def store_from_url(url: str) -> BlobStore:
    """`file:///dir` (or a plain path) or `s3://bucket/prefix` as a blob store."""
    parsed = urlparse(url)
    if parsed.scheme in ("", "file"):
        path = unquote(parsed.path) if parsed.scheme else url
        if not path:
            raise UserError(f"HITL_STORAGE {url!r} names no directory")
        return FileBlobStore(path)
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise UserError(f"HITL_STORAGE {url!r} names no bucket")
        return S3BlobStore(_aioboto3_client(), parsed.netloc, parsed.path)
    raise UserError(f"HITL_STORAGE {url!r}: use file:///dir or s3://bucket/prefix")


def _aioboto3_client() -> object:
    """An S3 client from the environment's AWS settings (`AWS_ENDPOINT_URL` for MinIO etc.)."""
    try:
        import aioboto3
        from temporalio.contrib.aws.s3driver.aioboto3 import new_aioboto3_client
    except ImportError:
        raise UserError(missing_extra("s3", "HITL_STORAGE=s3://...")) from None
    return _LazyS3(aioboto3, new_aioboto3_client)


class _LazyS3:
    """Opens the aioboto3 client on first use (the converter is built before any loop runs)."""

    def __init__(self, aioboto3: Any, wrap: Any) -> None:
        self._session: Any = aioboto3.Session()
        self._wrap = wrap
        self._client: Any = None
        self._context: Any = None
        self._lock = asyncio.Lock()

    async def aclose(self) -> None:
        """Close the client, if it was opened."""
        async with self._lock:
            if self._context is not None:
                await self._context.__aexit__(None, None, None)
            self._context = self._client = None

    async def _get(self) -> Any:
        async with self._lock:
            if self._client is None:
                self._context = self._session.client("s3")
                raw = await self._context.__aenter__()
                self._client = self._wrap(raw)
            return self._client

    async def put_object(self, *, bucket: str, key: str, data: bytes) -> None:
        await (await self._get()).put_object(bucket=bucket, key=key, data=data)

    async def object_exists(self, *, bucket: str, key: str) -> bool:
        ok: bool = await (await self._get()).object_exists(bucket=bucket, key=key)
        return ok

    async def get_object(self, *, bucket: str, key: str) -> bytes:
        data: bytes = await (await self._get()).get_object(bucket=bucket, key=key)
        return data
