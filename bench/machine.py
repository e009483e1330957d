"""What a benchmark ran on, printed before its figures: the development machine is a VM whose host
changes between sessions (the same code ran bench/engine.py 1.5-1.9x faster on 2026-11-24 than on
2026-11-22), so figures compare only between runs on the same host, best within one run."""

from __future__ import annotations

import os
import platform


def cpu_model() -> str:
    """The model name, with family and model numbers: a VM's model name alone is often generic."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            fields = dict(line.split(":", 1) for line in cpuinfo.read().split("\n\n")[0].splitlines()
                          if ":" in line)
    except OSError:
        return platform.processor() or "unknown CPU"
    fields = {name.strip(): value.strip() for name, value in fields.items()}
    return (f"{fields.get('model name', 'unknown CPU')} (family {fields.get('cpu family', '?')} "
            f"model {fields.get('model', '?')})")


def describe() -> str:
    return (f"machine: {cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"load average {os.getloadavg()[0]:.2f}")
