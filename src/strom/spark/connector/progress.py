"""Per-source lag from a StreamingQueryProgress, as Spark's Kafka source reports it in ``metrics``.

Python data sources cannot publish custom metrics, but the "strom" source reports its latest
offsets (``SourceProgress.latestOffset``), so the lag is the distance from the batch's end offsets.
"""

from __future__ import annotations

import json
from typing import Any

from strom.spark.connector.source import offsets_from_json

__all__ = ["offsets_behind_latest"]


def offsets_behind_latest(source_progress: Any) -> dict[str, float] | None:
    """``{min,max,avg}OffsetsBehindLatest`` over partitions; None before the first batch.

    Takes a ``SourceProgress`` or its dict form (``query.lastProgress["sources"][i]``).
    """
    latest_raw, end_raw = _field(source_progress, "latestOffset"), _field(source_progress, "endOffset")
    if not latest_raw or not end_raw:
        return None
    latest, end = offsets_from_json(_as_dict(latest_raw)), offsets_from_json(_as_dict(end_raw))
    behind = [max(0, offset - end.get(tp, 0)) for tp, offset in latest.items()]
    if not behind:
        return None
    return {"minOffsetsBehindLatest": float(min(behind)), "maxOffsetsBehindLatest": float(max(behind)),
            "avgOffsetsBehindLatest": sum(behind) / len(behind)}


def _field(progress: Any, name: str) -> Any:
    return progress.get(name) if isinstance(progress, dict) else getattr(progress, name, None)


def _as_dict(offsets: str | dict) -> dict:
    return json.loads(offsets) if isinstance(offsets, str) else offsets
