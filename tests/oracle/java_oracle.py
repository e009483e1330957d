"""The Java reference runner as a long-lived process: one JVM answers every spec of the session."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from strom.errors import StromError

ROOT = Path(__file__).resolve().parents[2]
ORACLE_POM = Path(__file__).parent / "java" / "pom.xml"
KAFKA_POM = ROOT / "tests" / "support" / "maven" / "apache-kafka" / "pom.xml"


def kafka_version(pom: Path) -> str:
    match = re.search(r"<kafka\.version>(.+?)</kafka\.version>", pom.read_text())
    if match is None:
        raise StromError(f"{pom} has no <kafka.version> property.")
    return match.group(1)


def oracle_dir() -> Path:
    return ROOT / ".cache" / "oracle" / kafka_version(ORACLE_POM)


class JavaOracle:
    """Kafka Streams (the Java library) answering specs over a line protocol on stdin/stdout."""

    def __init__(self) -> None:
        classes = oracle_dir() / "classes"
        if not (classes / ".complete").exists():
            raise StromError(f"The oracle's runner is not built ({classes}): run `make oracle`.")
        java = shutil.which("java")
        if java is None:
            raise StromError("The oracle needs Java 17+ on the PATH "
                             "(apt-get install openjdk-17-jdk-headless).")
        classpath = f"{classes}:{oracle_dir() / 'libs'}/*"
        self.process = subprocess.Popen(
            [java, "-Xss8m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", classpath,
             "dev.strom.oracle.Oracle"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1,
        )

    def run(self, spec: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(spec) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise StromError(f"The Java oracle exited (code {self.process.poll()}).")
        return json.loads(line)

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=30)
