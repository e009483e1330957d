"""User functions of the DSL. Like Java's overloads (ValueMapper vs ValueMapperWithKey), a function of
one required argument receives the value and a function of two receives (key, value)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from strom.errors import TopologyError


def required_positional(fn: Callable[..., Any]) -> int | None:
    """How many positional arguments ``fn`` needs; None when Python cannot tell (some builtins)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    count = 0
    for param in signature.parameters.values():
        if param.kind is param.VAR_POSITIONAL:
            return None
        if (
            param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD)
            and param.default is param.empty
        ):
            count += 1
    return count


def takes_key(fn: Callable[..., Any], operator: str) -> bool:
    """True for ``fn(key, value)``, False for ``fn(value)``."""
    if not callable(fn):
        raise TopologyError(f"{operator} needs a function, got {fn!r}.")
    arity = required_positional(fn)
    if arity in (1, 2, None):
        return arity == 2
    raise TopologyError(
        f"The function given to {operator} must take (value) or (key, value); it takes {arity} arguments."
    )


def value_function(fn: Callable[..., Any], operator: str) -> Callable[[Any, Any], Any]:
    """``fn(value)`` or ``fn(key, value)`` as a function of (key, value)."""
    if takes_key(fn, operator):
        return fn
    return lambda _key, value: fn(value)


def key_value_function(fn: Callable[..., Any], operator: str) -> Callable[[Any, Any], Any]:
    if not callable(fn):
        raise TopologyError(f"{operator} needs a function of (key, value), got {fn!r}.")
    arity = required_positional(fn)
    if arity not in (2, None):
        raise TopologyError(
            f"The function given to {operator} must take (key, value); it takes {arity} arguments."
        )
    return fn


# count() as Kafka Streams defines it: an aggregate starting at zero, one more per record (one less per
# record a KTable's re-grouping retracts); session windows merge counts by adding them


def count_initializer() -> int:
    return 0


def count_aggregator(_key: Any, _value: Any, count: int) -> int:
    return count + 1


def count_subtractor(_key: Any, _value: Any, count: int) -> int:
    return count - 1
