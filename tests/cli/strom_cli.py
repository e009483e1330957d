"""Runs the `strom` command as a user would: in-process through `main()` (argv, stdin bytes, exit code,
stdout bytes, stderr), or as a subprocess where librdkafka's own output must be seen."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from strom.cli.main import main
from support.processes import STROM


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def arg(raw: bytes) -> str:
    """A command-line argument holding these exact bytes (as the OS passes non-UTF-8 argv)."""
    return os.fsdecode(raw)


@dataclass
class Result:
    code: int
    out: bytes
    err: str

    @property
    def lines(self) -> list[str]:
        return self.out.decode().splitlines()


class Strom:
    """`strom ...` against one broker (STROM_BOOTSTRAP_SERVERS), in this process."""

    def __init__(self, bootstrap: str, monkeypatch: pytest.MonkeyPatch,
                 capsys: pytest.CaptureFixture) -> None:
        self.bootstrap = bootstrap
        self._monkeypatch, self._capsys = monkeypatch, capsys
        monkeypatch.setenv("STROM_BOOTSTRAP_SERVERS", bootstrap)

    def run(self, *args: str, stdin: bytes = b"") -> Result:
        self._capsys.readouterr()
        self._monkeypatch.setattr(sys, "argv", ["strom", *args])
        self._monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        out, err = self._capsys.readouterr()
        return Result(code, out, err.decode(errors="replace"))

    def ok(self, *args: str, stdin: bytes = b"") -> Result:
        result = self.run(*args, stdin=stdin)
        assert result.code == 0, result.err
        return result

    def fails(self, *args: str, stdin: bytes = b"") -> str:
        """The one `error: ...` line of a failed command (exit status 2, nothing else on stderr)."""
        return one_error_line(self.run(*args, stdin=stdin))


def one_error_line(result: Result) -> str:
    assert result.code == 2, (result.code, result.err)
    lines = result.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.err
    return lines[0]


def subprocess_strom(*args: str, stdin: bytes = b"", cwd: Path | None = None, timeout: float = 120) -> Result:
    """`strom` as its own process, its stderr exactly as a user sees it (librdkafka's log included)."""
    env = {k: v for k, v in os.environ.items() if k != "STROM_BOOTSTRAP_SERVERS"}
    done = subprocess.run([STROM, *args], input=stdin, capture_output=True, timeout=timeout, env=env,
                          cwd=cwd)
    return Result(done.returncode, done.stdout, done.stderr.decode(errors="replace"))


@pytest.fixture
def strom(broker, monkeypatch, capsysbinary) -> Strom:
    return Strom(broker.bootstrap_servers, monkeypatch, capsysbinary)
