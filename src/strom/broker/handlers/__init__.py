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

from strom.broker.security.acls import CLUSTER_NAME, SUPPORTED, Operation, ResourceType

if TYPE_CHECKING:
    from strom.broker.broker import Broker
    from strom.broker.protocol import EncodedResponse
    from strom.broker.security.listeners import Session

HANDLER_MODULES = ("metadata", "topics", "produce", "fetch", "groups", "transactions", "security")

NOT_REQUESTED = -2147483648  # INT32_MIN: the client did not ask for authorized operations


def authorized_operations(ctx: RequestContext, body: Any, field: str, resource_type: ResourceType,
                          name: str) -> int:
    """The bit set (AclOperation codes) of what the client may do on the resource, if `field` asks
    for it: without an authorizer everything the resource type supports, as Kafka says."""
    if not getattr(body, field, False):
        return NOT_REQUESTED
    authorizer = ctx.broker.authorizer
    return sum(1 << op for op in SUPPORTED[resource_type] if authorizer is None or authorizer.authorize(
        ctx.session.principal, ctx.client_host, op, resource_type, name))


@dataclass(frozen=True, slots=True)
class RequestContext:
    broker: Broker
    api_version: int
    client_id: str
    client_host: str
    correlation_id: int
    session: Session

    def authorize(self, operation: Operation, resource_type: ResourceType, name: str,
                  report: bool = True) -> bool:
        """Whether this client may do `operation` on the resource (always, without an authorizer); a
        refusal is logged unless `report` is False (a listing that leaves the resource out, as Kafka)."""
        authorizer = self.broker.authorizer
        if authorizer is None:
            return True
        principal = self.session.principal
        allowed = authorizer.authorize(principal, self.client_host, operation, resource_type, name)
        if not allowed and report:
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
