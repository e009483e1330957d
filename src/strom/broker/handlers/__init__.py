"""Registry of request handlers: one module per API group registers its APIs here.

A handler is an async function `(ctx, body) -> dict | EncodedResponse | None` answering one API for
every version in its advertised range; a dict is turned into the kio response of the request's
version (see `strom.broker.protocol.build`), an EncodedResponse (Fetch) is sent as it is, None
means "send no response" (Produce with acks=0).
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from strom.broker.security.acls import CLUSTER_NAME, Operation, ResourceType

if TYPE_CHECKING:
    from strom.broker.broker import Broker
    from strom.broker.protocol import EncodedResponse
    from strom.broker.security.listeners import Session

HANDLER_MODULES = ("metadata", "topics", "produce", "fetch", "groups", "transactions", "security")

# Without an authorizer Kafka allows a client every operation a resource supports, and says so when
# asked (bits are AclOperation codes); INT32_MIN means "not asked for".
NOT_REQUESTED = -2147483648
TOPIC_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))  # read ... alter_configs
CLUSTER_OPERATIONS = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))  # create ... idempotent_write
GROUP_OPERATIONS = sum(1 << op for op in (3, 6, 8, 10, 11))  # read, delete, describe, *_configs


def authorized_operations(body: Any, field: str, operations: int) -> int:
    return operations if getattr(body, field, False) else NOT_REQUESTED


@dataclass(frozen=True, slots=True)
class RequestContext:
    broker: Broker
    api_version: int
    client_id: str
    client_host: str
    correlation_id: int
    session: Session

    def authorize(self, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        """Whether this client may do `operation` on the resource (always, without an authorizer)."""
        authorizer = self.broker.authorizer
        if authorizer is None:
            return True
        principal = self.session.principal
        allowed = authorizer.authorize(principal, self.client_host, operation, resource_type, name)
        if not allowed:
            self.broker.report_denial(principal, self.client_host, operation, resource_type, name)
        return allowed

    def authorize_any(self, operation: Operation, resource_type: ResourceType) -> bool:
        authorizer = self.broker.authorizer
        return authorizer is None or authorizer.authorize_any(self.session.principal, self.client_host,
                                                              operation, resource_type)

    def authorize_cluster(self, operation: Operation) -> bool:
        return self.authorize(operation, ResourceType.CLUSTER, CLUSTER_NAME)


Handler = Callable[[RequestContext, Any], Awaitable["dict[str, Any] | EncodedResponse | None"]]


@dataclass(frozen=True, slots=True)
class ApiHandler:
    api_key: int
    min_version: int
    max_version: int
    handle: Handler


REGISTRY: dict[int, ApiHandler] = {}


def handles(api_key: int, min_version: int, max_version: int) -> Callable[[Handler], Handler]:
    """Registers the decorated function as the handler of `api_key` for these versions."""
    def register(function: Handler) -> Handler:
        REGISTRY[api_key] = ApiHandler(api_key, min_version, max_version, function)
        return function
    return register


def load_handlers() -> dict[int, ApiHandler]:
    for name in HANDLER_MODULES:
        importlib.import_module(f"strom.broker.handlers.{name}")
    return REGISTRY


def ms(value: Any) -> int:
    """Milliseconds of a kio timedelta field (or an int)."""
    return value if isinstance(value, int) else round(value.total_seconds() * 1000)
