"""Fusing a source's chain of stateless operators into one function when the task is built.

A record through ``filter -> map_values -> to`` costs a call per node and a ``Record`` per step; most
of a stateless chain's time. When a task's processors never read the record context, each stateless
processor may describe its step as a few lines of Python over the locals ``k, v, t, h`` (key, value,
timestamp, headers), returning early to drop the record (``FusedStep``). The fuser joins the steps of
the chain that starts at a source into one function ``chain(k, v, t, h)``, compiled once per task;
where the chain meets a processor that gives no step (most stateful ones, a fan-out, a user's), the
function hands that node a ``Record`` as its parent would have. A KStream aggregation and a tumbling
windowed one give a terminal step (they read the record context the task set for the record, and
forward through the cache's flush), with the cached store's read and write inlined. Records still go
through the chain one at a time, depth-first, in order: fusion changes what the interpreter executes,
not what is observed. An update a record cache flushes goes on the same way, through the chain below
the flushing node (``ProcessorContextImpl.forward_flushed``), when its timestamp and headers are the
record context's (the flushed entry's), as a source record's are.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from strom.streams.internals.compiled import compile_function
from strom.streams.internals.tuples import new_tuple
from strom.streams.processor.api import Record


class FusedStep(NamedTuple):
    """One processor's step: ``lines`` use ``{p}`` before each name of ``names`` (made unique per node)
    and the locals ``k, v, t, h``; ``terminal`` steps (a sink) end the chain."""

    lines: tuple[str, ...]
    names: dict[str, Any]
    terminal: bool = False


Chain = Callable[[Any, Any, int, Any], None]


def fuse(first: Any) -> Chain | None:
    """The fused function of the chain starting at node ``first`` (a source's only child), or None when
    its first node gives no step (nothing to gain over calling its entry)."""
    body: list[str] = []
    names: dict[str, Any] = {"_Record": Record, "_new_tuple": new_tuple}
    node, index = first, 0
    while True:
        step = _step_of(node)
        if step is None:
            if index == 0:
                return None
            names["_tail"] = node.entry
            body.append("_tail(_new_tuple(_Record, (k, v, t, h)))")
            break
        prefix = f"_{index}_"
        names.update({prefix + name: value for name, value in step.names.items()})
        body.extend(line.replace("{p}", prefix) for line in step.lines)
        index += 1
        if step.terminal or not node.children:
            break
        if len(node.children) != 1:
            names["_fan_out"] = node.context.forwarder
            body.append("_fan_out(_new_tuple(_Record, (k, v, t, h)))")
            break
        node = node.children[0]
    return compile_function(f"fused chain from {first.name}", "chain(k, v, t, h)", body or ["pass"], names)


def _step_of(node: Any) -> FusedStep | None:
    """A node's step if its processor gives one and nothing wraps its entry (a handler). The wrapper
    that stamps a record's timestamp and headers into the record context (a node with stores) may be
    skipped: no step changes ``t`` or ``h``, so along a fused chain they are the source record's, which
    the task made the record context."""
    fused_step = getattr(node.processor, "fused_step", None)
    if fused_step is None or (node.entry != node.processor.process and node.entry is not node.stamping_entry):
        return None
    return fused_step()
