"""The Spark session of a command (`strom run`, `strom demo`): quiet unless ``strom -v`` asks for Spark's
own start-up notices (``-vv`` adds Spark's INFO log)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click


def verbosity() -> int:
    """How many ``-v`` the ``strom`` command line gave (0 outside a command)."""
    context = click.get_current_context(silent=True)
    return int(context.find_root().params.get("verbose", 0) or 0) if context is not None else 0


def spark_session(app_name: str, master: str = "local[2]", config: Mapping[str, str] | None = None,
                  strom_format: bool = True) -> Any:
    """Spark is imported here, when a command needs it."""
    import strom.spark

    verbose = verbosity()
    return strom.spark.session(app_name=app_name, master=master, config=config,
                               log_level="INFO" if verbose > 1 else "WARN", quiet=verbose == 0,
                               strom_format=strom_format)
