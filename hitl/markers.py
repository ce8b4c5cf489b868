"""Encodings of the stand-ins for payloads that could not be read.

The codec (`hitl.codec`) and the blob store (`hitl.storage`) never raise while a workflow task
decodes: a payload they cannot read comes back as an empty payload with one of these encodings
and a `reason` in its metadata. The run's handlers refuse such a payload like any bad input, and
typed reads turn it into `StoredPayloadMissing`.

The module is imported by workflow code: constants only, no I/O.
"""

from __future__ import annotations

UNDECRYPTABLE = b"binary/undecryptable"
"""Encoding of a payload the codec could not decrypt (metadata `reason` says why)."""

UNRETRIEVABLE = b"binary/unretrievable"
"""Encoding of the stand-in for a stored payload that could not be read (`reason` says why)."""
