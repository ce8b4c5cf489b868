"""What every activity needs: the user's context object, and misconfiguration as a failure.

The context is rebuilt from the run's JSON; a `UserError` fails the activity without retries.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import TypeAdapter, ValidationError
from temporalio.exceptions import ApplicationError

from hitl.errors import UserError
from hitl.refs import Allowed
from hitl.wire import RunContextData


def rebuild_context(data: RunContextData | None, allowed: Allowed) -> Any:
    """The context object user code sees: its JSON value, rebuilt as its type when one is known.

    The type and the deserializer are names; only ones this worker allows are used.
    """
    if data is None:
        return None
    if data.deserializer is not None:
        fn = allowed.get_callable(data.deserializer, what="the run's context_deserializer")
        return fn(data.value)
    if data.type is None:
        return data.value
    cls: Any = allowed.get(data.type, what="the run context's type")
    if not isinstance(cls, type):
        raise UserError(f"the run context's type {data.type!r} is not a type")
    try:
        return TypeAdapter(cls).validate_python(data.value)
    except ValidationError as exc:
        raise UserError(f"the run context does not validate as {data.type}: {exc}") from exc


def context_value(obj: Any, data: RunContextData | None) -> Any:
    """The JSON form of a (possibly changed) context object, as the workflow stores it.

    Raises `TypeError` when the object cannot be turned back into JSON here (a context with a
    custom serializer only the client knows).
    """
    if data is not None and data.deserializer is not None:
        raise TypeError("contexts with a custom serializer are read-only in tools")
    if data is not None and data.type is not None:
        return TypeAdapter(type(obj)).dump_python(obj, mode="json")
    return json.loads(json.dumps(obj))


def user_failure(exc: UserError) -> ApplicationError:
    """A `UserError` as the activity's failure: typed `UserError`, and not retried.

    An unknown agent, a name this worker does not allow, user code returning the wrong type:
    retrying cannot fix any of them.
    """
    return ApplicationError(exc.message, type="UserError", non_retryable=True)
