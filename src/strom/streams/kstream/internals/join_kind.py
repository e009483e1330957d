"""Which records a join emits, shared by the wiring of every join kind."""

from __future__ import annotations

import enum


class JoinKind(enum.Enum):
    """INNER: only records with a partner; LEFT: every left record too; OUTER: every record of either
    side. The value is the DSL method's name, for messages."""

    INNER = "join"
    LEFT = "left_join"
    OUTER = "outer_join"

    @property
    def node_infix(self) -> str:
        """Kafka Streams' infix of the join's generated node names (``KSTREAM-LEFTJOIN-0000000003``)."""
        return {JoinKind.INNER: "JOIN", JoinKind.LEFT: "LEFTJOIN", JoinKind.OUTER: "OUTERJOIN"}[self]
