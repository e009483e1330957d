"""The named functions a spec's operators use, as the Java runner (Oracle.java) defines them.

Values are Longs (Python ints kept within a Java long) and keys Strings from KEYS; every function is
null-safe the same way on both sides, and ``%`` is Java's ``Math.floorMod`` (Python's ``%``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

KEYS = ("a", "b", "c")


def predicate(fn: str) -> Callable[[Any, Any], bool]:
    return {
        "even": lambda k, v: v is not None and v % 2 == 0,
        "gt5": lambda k, v: v is not None and v > 5,
        "key_a": lambda k, v: k == "a",
        "not_null": lambda k, v: v is not None,
    }[fn]


def map_value(fn: str) -> Callable[[Any, Any], Any]:
    op: Callable[[Any, int], int] = {
        "inc": lambda k, v: v + 1,
        "dbl": lambda k, v: v * 2,
        "mod7": lambda k, v: v % 7,
        "keylen": lambda k, v: (-1 if k is None else len(k)) + v,
    }[fn]
    return lambda k, v: None if v is None else op(k, v)


def _index(key: Any) -> int:
    """``key``'s index in KEYS, -1 if it is not one (a windowed key rendered as text), as Java's indexOf."""
    return KEYS.index(key) if key in KEYS else -1


def select_key(fn: str) -> Callable[[Any, Any], Any]:
    return {
        "vmod3": lambda k, v: None if v is None else KEYS[v % 3],
        "same": lambda k, v: k,
        "const": lambda k, v: "a",
        "next": lambda k, v: "b" if k is None else KEYS[(_index(k) + 1) % 3],
    }[fn]


def flat_map(fn: str) -> Callable[[Any], list[Any]]:
    return {
        "dup": lambda v: [] if v is None else [v, v + 100],
        "none": lambda v: [],
    }[fn]


def reduce(fn: str) -> Callable[[Any, Any], Any]:
    return {
        "sum": lambda a, v: a + v,
        "max": max,
        "latest": lambda a, v: v,
        "sub": lambda a, v: a - v,
    }[fn]


def join(fn: str) -> Callable[[Any, Any], Any]:
    return {
        "lr": lambda left, right: (1000 if left is None else left) + 2 * (100000 if right is None else right),
        "left": lambda left, right: left,
    }[fn]
