"""Connecting to Temporal the way the `temporal` CLI does (envconfig), with our data converter."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter, DefaultFailureConverterWithEncodedAttributes
from temporalio.envconfig import ClientConfig

from hitl.codec import EncryptionCodec
from hitl.errors import UserError

DEFAULT_ADDRESS = "localhost:7233"


def data_converter(codec: EncryptionCodec | None = None) -> DataConverter:
    """The pydantic data converter, with payload encryption when a codec is given or configured.

    With encryption, failure messages and stack traces are encoded too (they may quote tool
    arguments).
    """
    codec = codec if codec is not None else EncryptionCodec.from_env()
    if codec is None:
        return pydantic_data_converter
    return dataclasses.replace(
        pydantic_data_converter,
        payload_codec=codec,
        failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
    )


def connect_config(
    *, profile: str | None = None, address: str | None = None, namespace: str | None = None
) -> dict[str, Any]:
    """Connection settings from the TOML profile and `TEMPORAL_*` variables, as the CLI reads them.

    Falls back to `localhost:7233` and the `default` namespace.
    """
    try:
        config: dict[str, Any] = dict(ClientConfig.load_client_connect_config(profile=profile))
    except Exception as exc:
        raise UserError(f"cannot load the Temporal client configuration: {exc}") from exc
    if address:
        config["target_host"] = address
    if namespace:
        config["namespace"] = namespace
    config.setdefault("target_host", DEFAULT_ADDRESS)
    if not config.get("target_host"):
        config["target_host"] = DEFAULT_ADDRESS
    return config


_cached: dict[tuple[int, str, str | None], Client] = {}


async def connect(
    client: Client | None = None,
    *,
    profile: str | None = None,
    address: str | None = None,
    namespace: str | None = None,
) -> Client:
    """Return `client`, or connect with envconfig settings (cached per event loop).

    A wrong address fails fast with a message naming it.
    """
    if client is not None:
        return client
    config = connect_config(profile=profile, address=address, namespace=namespace)
    key = (id(asyncio.get_running_loop()), str(config.get("target_host")), profile)
    if key in _cached and address is None and namespace is None:
        return _cached[key]
    try:
        new = await Client.connect(**config, data_converter=data_converter())
    except Exception as exc:
        raise UserError(
            f"cannot connect to Temporal at {config['target_host']} "
            f"(namespace {config.get('namespace', 'default')}): {exc}. "
            "Start a server (`make dev`) or set TEMPORAL_ADDRESS."
        ) from exc
    if address is None and namespace is None:
        _cached[key] = new
    return new
