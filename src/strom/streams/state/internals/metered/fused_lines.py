"""Lines of Python the metered stores compile into fused reads and writes (locals ``k``, ``kb``, ``r``,
``w``; names ``{p}``-prefixed), shared by the key-value and window kinds."""

from __future__ import annotations

# MeteredKeyValueStore.fused_read_modify_write's lines (locals k, kb, r, w; names {p}-prefixed)
KEY_LINES = (
    "if k is None or not {p}store._open:",
    "    {p}raw_key_of(k)",  # raises the right error
    "try:",
    "    kb = {p}key_encode(k)",
    "except Exception:",
    "    kb = {p}raw_key_of(k)",
)
# the record cache's read and write of the store key kb (r: its raw value or None; wb: the bytes to
# write), a timestamped value's decode into rv and rt and its encode from n and t (for fixed-width
# numbers one struct call each, no ValueAndTimestamp); the full serde paths are {p}from_bytes and
# {p}to_bytes, which decide what the fast functions refuse
CACHE_READ = (
    "e = {p}lookup(kb)",
    "if e is None:",
    "    r = {p}below(kb)",
    "else:",
    "    {p}mark_used(kb)",
    "    r = e.value",
)
CACHE_WRITE = ("{p}put_dirty(kb, wb, {p}context.record_context)",)
PAIR_DECODE = (
    "if r is not None:",
    "    try:",
    "        rt, rv = {p}unpack(r)",
    "    except Exception:",
    "        rv, rt = {p}from_bytes(r)",
)
PAIR_ENCODE = (
    "try:",
    "    if type(n) in {p}kinds:",
    "        wb = {p}pack(t, n)",
    "    else:",
    "        wb = {p}encode(_new_tuple({p}vat, (n, t)))",
    "except Exception:",
    "    wb = {p}to_bytes(_new_tuple({p}vat, (n, t)))",
)
LOOKUP_LINES = ("{p}metrics.get += 1", *KEY_LINES, *CACHE_READ)
