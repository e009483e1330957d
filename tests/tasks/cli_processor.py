"""A processor for the CLI test: appends each task to the file named by $STROM_TASKS_OUT."""

import os


def record(context, task: bytes) -> None:
    with open(os.environ["STROM_TASKS_OUT"], "ab") as f:
        f.write(task + b"\n")
