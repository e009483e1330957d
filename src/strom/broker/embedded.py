"""EmbeddedBroker: a strom broker in a child process, for tests, the demo and apps without a cluster."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from strom.broker.config import LOCAL_DEFAULTS
from strom.errors import BrokerUnavailableError

log = logging.getLogger(__name__)

START_TIMEOUT_SECONDS = 60.0


class EmbeddedBroker:
    """Starts `python -m strom.broker` in a child process; `bootstrap_servers` says where it listens.

    `data_dir=None` means a temporary directory removed on exit. `restart()` keeps the data
    directory and the port; `kill()` is a kill -9 (crash) for fault-injection tests.
    """

    def __init__(self, data_dir: str | Path | None = None, port: int = 0,
                 config: Mapping[str, Any] | None = None, host: str = "127.0.0.1") -> None:
        self._temporary = data_dir is None
        self.data_dir = Path(tempfile.mkdtemp(prefix="strom-broker-")) if data_dir is None else Path(data_dir)
        self.host = host
        self.port = port
        self.config = {**LOCAL_DEFAULTS, **{k: str(v) for k, v in (config or {}).items()}}
        self.listeners: dict[str, str] = {}  # listener name -> host:port, once started
        self._process: subprocess.Popen | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "broker.log"

    def start(self) -> EmbeddedBroker:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        ready = self.data_dir / "ready.json"
        ready.unlink(missing_ok=True)
        command = [sys.executable, "-m", "strom.broker", "--data-dir", str(self.data_dir),
                   "--host", self.host, "--port", str(self.port), "--ready-file", str(ready)]
        for key, value in self.config.items():
            command += ["--config", f"{key}={value}"]
        if self._temporary:
            command.append("--temporary")
        with open(self.log_path, "ab") as log_file:
            # a session of its own: a terminal's Ctrl-C reaches the parent, which stops its clients
            # first and the broker last (it stops with its parent, see strom.broker.__main__)
            self._process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT,
                                             start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while not ready.exists():
            if self._process.poll() is not None:
                raise BrokerUnavailableError(
                    f"The embedded broker exited with code {self._process.returncode} while starting; "
                    f"see {self.log_path}.")
            if time.monotonic() > deadline:
                self.kill()
                raise BrokerUnavailableError(
                    f"The embedded broker did not start in time; see {self.log_path}.")
            time.sleep(0.02)
        started = json.loads(ready.read_text())
        self.port, self.listeners = started["port"], started["listeners"]
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Clean shutdown (SIGTERM: flush and close segments); kills if it does not exit in time."""
        if self._process is None:
            return
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("embedded broker did not stop in %.0f s; killing it", timeout)
                self.kill()
        self._process = None

    def kill(self) -> None:
        """Crashes the broker (SIGKILL): nothing is flushed, as in a power-less process death."""
        if self._process is not None:
            if self._process.poll() is None:
                os.kill(self._process.pid, signal.SIGKILL)
            self._process.wait()
            self._process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    @property
    def pid(self) -> int | None:
        """Process id of the running broker (benchmarks read its CPU time)."""
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def __enter__(self) -> EmbeddedBroker:
        try:
            return self.start()
        except BaseException:
            self._cleanup()
            raise

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
        self._cleanup()

    def _cleanup(self) -> None:
        if self._temporary:
            shutil.rmtree(self.data_dir, ignore_errors=True)
