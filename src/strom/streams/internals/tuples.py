"""The per-record hot path's NamedTuple constructor."""

new_tuple = tuple.__new__
"""``new_tuple(Record, (key, value, timestamp, headers))``: the C-level constructor of a NamedTuple
(Record, Change, RecordContext, ValueAndTimestamp), without the NamedTuple's Python-level ``__new__``."""
