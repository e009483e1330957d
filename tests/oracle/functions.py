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
        # a key not in KEYS (a windowed key "a@0/10") is Java's indexOf -1: next is "a"
        "next": lambda k, v: "b" if k is None else KEYS[(_index(k) + 1) % 3],
        "vmod4none": lambda k, v: None if v is None or v % 4 == 0 else KEYS[v % 3],
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


def cogroup_aggregator(fn: str) -> Callable[[Any, Any, Any], Any]:
    """A cogroup input's aggregator: each input weighs its values differently (a null value as 1000),
    so an update read from the wrong input shows."""
    weight = {"add": 1, "add10": 10, "add100": 100}[fn]
    return lambda k, v, a: a + weight * (1000 if v is None else v)


def process_record(fn: str, store: Any, key: Any, value: Any,
                   fixed_key: bool) -> list[tuple[Any, Any, int, bool]]:
    """What the named processor does with a record: its store update, then the records it forwards as
    (key, value, timestamp offset, whether header ``p`` is added)."""
    if fn == "running_sum":
        if key is None or value is None:
            return [(key, value, 0, False)]
        total = (store.get(key) or 0) + value
        store.put(key, total)
        return [(key, total, 0, False)]
    if fn == "dedupe":
        if key is None:
            return [(key, value, 0, False)]
        if value != store.get(key):
            store.put(key, value)
            return [(key, value, 0, False)]
        return []
    if fn == "buffer_then_punctuate":
        if key is not None:
            store.put(key, value)
        return []
    if fn == "fanout":
        if fixed_key:
            return [(key, None if value is None else value * 2, 0, False), (key, None, 1, True)]
        return [(select_key("next")(key, value), value, 0, False),
                (None, None if value is None else value + 1, 1, True)]
    raise ValueError(f"processor {fn}")


def punctuate_store(fn: str, store: Any) -> list[tuple[Any, Any]]:
    """The stored entries a punctuation forwards, in key order (deleted if the processor buffers)."""
    entries = list(store.all())
    if fn == "buffer_then_punctuate":
        for key, _ in entries:
            store.delete(key)
    return entries


def transform(fn: str, context: Any, store: Any, key: Any, value: Any) -> Any:
    """The named ValueTransformerWithKey's ``transform``."""
    if fn == "triple":
        return None if value is None else value * 3
    if fn == "context":
        # the record context: a value getter's transformer sees a substitute (no topic, no headers)
        headers = len(context.headers())
        no_topic = context.record_metadata() is None
        return None if value is None else value + (1000 if no_topic else 0) + 10 * headers
    if fn == "count_seen":
        n = (store.get(key) or 0) + 1
        store.put(key, n)
        return None if value is None else value * 10 + n
    raise ValueError(f"transformer {fn}")
