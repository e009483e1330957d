"""Functions compiled from lines of Python when a task is built: the fused chains of stateless steps
(processor/internals/fusion.py), a cached store's fused read-modify-write and a record cache's fused
flush (state/internals). Each piece of lines names what it calls with a ``{p}`` prefix, made unique
per piece when pieces are joined (``prefixed``)."""

from __future__ import annotations

import linecache
from collections.abc import Callable, Iterable
from typing import Any

Lines = tuple[tuple[str, ...], dict[str, Any]]
"""Lines of Python and the ``{p}``-prefixed names they use."""


def prefixed(lines: Iterable[str], names: dict[str, Any], prefix: str) -> Lines:
    """``lines`` and ``names`` with ``{p}`` replaced by ``prefix`` (which may itself hold ``{p}``, for a
    piece that is joined into a larger one)."""
    return (tuple(line.replace("{p}", prefix) for line in lines),
            {name.replace("{p}", prefix): value for name, value in names.items()})


def compile_function(title: str, signature: str, body: Iterable[str], names: dict[str, Any]
                     ) -> Callable[..., Any]:
    """``def signature: body`` compiled with ``names`` as its globals (``signature`` is e.g.
    ``"chain(k, v, t, h)"``); its source is kept for tracebacks under ``<title>``."""
    source = f"def {signature}:\n" + "".join(f"    {line}\n" for line in body)
    filename = f"<{title}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), names)
    return names[signature.partition("(")[0]]
