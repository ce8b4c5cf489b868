"""Cluster setup: the custom search attributes runs keep current (`hitl setup`)."""

from __future__ import annotations

import logging

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.api.workflowservice.v1 import GetSearchAttributesRequest
from temporalio.client import Client
from temporalio.service import RPCError

from hitl.wire import CORE_SEARCH_ATTRIBUTES, SA_OUTCOMES, SEARCH_ATTRIBUTES

log = logging.getLogger("hitl")

_TYPES = {
    "Keyword": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "KeywordList": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD_LIST,
    "Datetime": IndexedValueType.INDEXED_VALUE_TYPE_DATETIME,
    "Int": IndexedValueType.INDEXED_VALUE_TYPE_INT,
    "Text": IndexedValueType.INDEXED_VALUE_TYPE_TEXT,
    "Bool": IndexedValueType.INDEXED_VALUE_TYPE_BOOL,
    "Double": IndexedValueType.INDEXED_VALUE_TYPE_DOUBLE,
}


def search_attribute_type(kind: str) -> int:
    """The `IndexedValueType` of a search attribute kind of ours (`Keyword`, `Datetime`, ...)."""
    return _TYPES[kind]


async def registered_search_attributes(client: Client) -> dict[str, int] | None:
    """Search attributes of the client's namespace, `{name: IndexedValueType}`.

    `None` when the server does not say (e.g. the time-skipping test server).
    """
    try:
        resp = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=client.namespace)
        )
        return {**dict(resp.system_attributes), **dict(resp.custom_attributes)}
    except RPCError:
        pass
    try:
        resp2 = await client.workflow_service.get_search_attributes(GetSearchAttributesRequest())
        return dict(resp2.keys)
    except RPCError:
        return None


async def missing_search_attributes(client: Client) -> list[str] | None:
    """Our search attributes that are absent or of the wrong type (`None`: unknown)."""
    have = await registered_search_attributes(client)
    if have is None:
        return None
    return [name for name, kind in SEARCH_ATTRIBUTES.items() if have.get(name) != _TYPES[kind]]


async def available_search_attributes(client: Client) -> list[str] | None:
    """Our search attributes a run may upsert: registered, with the right type (`None`: unknown).

    A namespace set up by an earlier release lacks the attributes added since (`HitlDeadline`,
    `HitlOutcomes`); runs keep the ones it has, and the missing ones are named in a warning.
    """
    missing = await missing_search_attributes(client)
    if missing is None:
        return None
    if missing:
        log.warning(
            "search attributes %s are not registered in namespace %r: runs keep the others, "
            "and are not listable by these. Register them with `hitl setup`.",
            ", ".join(missing),
            client.namespace,
        )
    return [name for name in SEARCH_ATTRIBUTES if name not in missing]


async def search_attributes_ready(client: Client) -> bool:
    """True when runs may upsert our core search attributes (registered with the right types).

    Upserting an unregistered attribute would fail every workflow task of a run, so workers
    check once at start and runs skip the attributes when they are missing.
    """
    return (await search_attributes_readiness(client))[0]


async def search_attributes_readiness(client: Client) -> tuple[bool, bool]:
    """Whether the core search attributes, and `HitlOutcomes`, may be upserted."""
    missing = await missing_search_attributes(client)
    if missing:
        log.warning(
            "search attributes %s are not registered in namespace %r: runs will not be "
            "listable by them. Register them with `hitl setup`.",
            ", ".join(missing),
            client.namespace,
        )
    if missing is None:
        return False, False
    core = not set(missing) & set(CORE_SEARCH_ATTRIBUTES)
    return core, core and SA_OUTCOMES not in missing


async def register_search_attributes(client: Client) -> list[str]:
    """Register our search attributes where missing; returns the names added."""
    missing = await missing_search_attributes(client)
    if missing is None:
        missing = list(SEARCH_ATTRIBUTES)
    if not missing:
        return []
    await client.operator_service.add_search_attributes(
        AddSearchAttributesRequest(
            namespace=client.namespace,
            search_attributes={name: _TYPES[SEARCH_ATTRIBUTES[name]] for name in missing},
        )
    )
    return missing
