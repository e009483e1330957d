"""Checks run before Spark starts, so a missing Java fails with advice instead of a JVM trace."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from strom.errors import JavaNotFoundError

__all__ = ["MIN_JAVA_MAJOR", "JavaRuntime", "check_java", "parse_java_version"]

MIN_JAVA_MAJOR = 17

_INSTALL_HINT = (
    "Install Java 17 or newer and put `java` on PATH (or set JAVA_HOME), for example "
    "`apt-get install openjdk-17-jre-headless` on Debian/Ubuntu or `brew install openjdk@17` "
    "on macOS."
)


@dataclass(frozen=True)
class JavaRuntime:
    executable: str
    major: int
    version: str


def _java_executable() -> str | None:
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("java")


def parse_java_version(output: str) -> tuple[int, str]:
    """Reads the major version from `java -version` output ("1.8.0_392" → 8, "17.0.15" → 17)."""
    match = re.search(r'version "([^"]+)"', output)
    if not match:
        raise JavaNotFoundError(
            f"Could not read the Java version from `java -version` output {output.strip()!r}. "
            + _INSTALL_HINT
        )
    version = match.group(1)
    parts = version.split(".")
    major = int(parts[1]) if parts[0] == "1" and len(parts) > 1 else int(re.match(r"\d+", parts[0])[0])
    return major, version


def check_java(minimum: int = MIN_JAVA_MAJOR) -> JavaRuntime:
    """Returns the Java runtime Spark will use, or raises JavaNotFoundError saying how to fix it."""
    executable = _java_executable()
    if executable is None:
        raise JavaNotFoundError(f"Spark needs Java {minimum}+, but no `java` was found. {_INSTALL_HINT}")
    try:
        result = subprocess.run(
            [executable, "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise JavaNotFoundError(f"Running `{executable} -version` failed ({exc}). {_INSTALL_HINT}") from exc
    major, version = parse_java_version(result.stderr + result.stdout)
    if major < minimum:
        raise JavaNotFoundError(
            f"Spark needs Java {minimum}+, but {executable} is Java {version}. {_INSTALL_HINT}"
        )
    return JavaRuntime(executable=executable, major=major, version=version)
