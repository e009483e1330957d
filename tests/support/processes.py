"""What a test needs to start processes of its own: the `strom` command as a user runs it (this venv's
console script, so each run is a fresh interpreter) and a free port for a listener.

    from support.processes import STROM, free_port   # tests/ is on sys.path under pytest

    subprocess.run([STROM, "topics", "list", "-b", bootstrap], ...)
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

STROM = str(Path(sys.executable).with_name("strom"))


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now (another process may take it before the test)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
