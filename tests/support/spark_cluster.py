"""A Spark standalone cluster on loopback for tests: a master and N workers started with pyspark's own
``bin/spark-class`` (no separate Spark install), so tests can ``spark-submit`` to it and kill workers.

    from support.spark_cluster import SparkCluster   # tests/ is on sys.path under pytest

    with SparkCluster(tmp_path, workers=2, cores_per_worker=1) as cluster:
        cluster.master_url                     # spark://127.0.0.1:<port>
        result = cluster.submit("app.py", "arg", conf={"spark.task.maxFailures": "4"})
        cluster.driver_conf(), cluster.env     # for a driver started another way (strom run --master)
        process = cluster.submit_background("app.py")   # a Popen, for a test that acts meanwhile
        cluster.start_worker(2)                # another worker (or a killed one again)
        cluster.kill_worker(0)                 # SIGKILL: worker 0, its executors and their Python workers
        cluster.use_workers([0, 1])            # exactly these workers running (a cluster shared by tests)
        cluster.worker_of(pid)                 # which worker runs process pid (a stream thread's)
        cluster.alive_workers()                # as the master sees them
        cluster.applications()                 # names of applications it ran

    SparkCluster(base_dir, python=None)        # executors run the Python the driver names (PYSPARK_PYTHON)
    without_this_venv(os.environ)              # an environment that leads to no Python of this venv
    SparkCluster(base_dir, hosts={"master": h0, "worker-0": h1, "worker-1": h2, "driver": h3})
                                               # each on a host of its own (tests/support/hosts.py)

Everything binds to 127.0.0.1, or with ``hosts`` each named process (``master``, ``worker-<i>``, and
``driver`` for ``submit``) runs on its host (in its namespace) and binds to that host's address.
Each process runs in its own process group (``start_new_session``): a
worker's executor JVMs and their Python daemons and workers are its descendants in that group, so
``kill_worker`` kills the whole group at once (as a machine failure would) and teardown stops every
group (SIGTERM, then SIGKILL after ``stop_timeout_s``). Each worker has its own directory under
``base_dir`` (``worker-<i>/work`` for executors' stdout/stderr, ``worker-<i>/local`` for Spark's
local dirs, ``worker-<i>/state`` for strom's stream-task stores: ``STROM_STATE_DIR`` in the worker's
environment, inherited by its executors, so each worker keeps its state as a machine of its own would)
and its own environment; logs of the master and workers are ``base_dir/*.log`` and are
printed in the error when a process does not come up. Executors run ``sys.executable`` (this venv),
or with ``python=None`` whatever Python the driver names (``PYSPARK_PYTHON``): the cluster's
environment then has no Python of this venv (no ``PYSPARK_PYTHON``, ``VIRTUAL_ENV``, ``PYTHONPATH``, and
this venv's ``bin`` off ``PATH``), as a cluster that only has Spark installed.
Daemon JVMs get ``daemon_memory`` heap; executors get ``executor_memory`` (set on submit).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

import pyspark

from strom.spark.runtime.executor import STATE_DIR_VARIABLE
from support.processes import free_port

if TYPE_CHECKING:
    from support.hosts import Host

SPARK_HOME = Path(pyspark.__file__).parent
_START_TIMEOUT_S = 120.0


class SparkCluster:
    """A running standalone cluster; use as a context manager (or ``start()`` / ``stop()``)."""

    def __init__(self, base_dir: Path, workers: int = 1, cores_per_worker: int = 1,
                 worker_memory: str = "1g", daemon_memory: str = "256m", executor_memory: str = "512m",
                 env: Mapping[str, str] | None = None, stop_timeout_s: float = 15.0,
                 python: str | None = sys.executable, hosts: Mapping[str, Host] | None = None,
                 java_options: str = "") -> None:
        self.base_dir = Path(base_dir)
        self.java_options = java_options
        self.hosts = dict(hosts or {})
        self.workers = workers
        self.cores_per_worker = cores_per_worker
        self.worker_memory = worker_memory
        self.executor_memory = executor_memory
        self.stop_timeout_s = stop_timeout_s
        self.python = python
        pythons = {"PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python} if python else {}
        inherited = os.environ if python else without_this_venv(os.environ)
        self.env = {**inherited, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": self.address("driver"),
                    "SPARK_DAEMON_MEMORY": daemon_memory, **pythons,
                    **({"SPARK_DAEMON_JAVA_OPTS": java_options} if java_options else {}), **(env or {})}
        self.master_port = free_port()
        self.master_ui_port = free_port()
        self._master: subprocess.Popen | None = None
        self._workers: dict[int, subprocess.Popen] = {}

    def address(self, name: str) -> str:
        """Where process ``name`` (``master``, ``worker-<i>``, ``driver``) binds: its host's address."""
        return self.hosts[name].address if name in self.hosts else "127.0.0.1"

    def _on_host(self, name: str, command: list[str]) -> list[str]:
        return self.hosts[name].command(command) if name in self.hosts else command

    def driver_conf(self) -> dict[str, str]:
        """Spark configs a driver of this cluster needs (loopback addresses, executor memory, this Python);
        ``submit`` passes them, a driver started otherwise (``strom run --spark-conf``) should too."""
        driver = self.address("driver")
        conf = {"spark.driver.host": driver, "spark.driver.bindAddress": driver,
                "spark.executor.memory": self.executor_memory,
                **({"spark.driver.extraJavaOptions": self.java_options,
                    "spark.executor.extraJavaOptions": self.java_options} if self.java_options else {})}
        return {**conf, "spark.pyspark.python": self.python} if self.python else conf

    @property
    def master_url(self) -> str:
        return f"spark://{self.address('master')}:{self.master_port}"

    @property
    def master_ui_url(self) -> str:
        return f"http://{self.address('master')}:{self.master_ui_port}"

    def worker_dir(self, index: int) -> Path:
        return self.base_dir / f"worker-{index}"

    def start(self) -> SparkCluster:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self._master = self._spawn("master", "org.apache.spark.deploy.master.Master", [
            "--host", self.address("master"), "--port", str(self.master_port), "--webui-port",
            str(self.master_ui_port)], {**self.env, "SPARK_LOCAL_IP": self.address("master")})
        self._wait(lambda: self._master_state() is not None, "the master to serve its UI", "master")
        for index in range(self.workers):
            self.start_worker(index)
        self._wait(lambda: self.alive_workers() >= self.workers, f"{self.workers} workers to register",
                   "worker-0")
        return self

    def start_worker(self, index: int) -> None:
        """Starts worker ``index`` (again, after ``kill_worker``: the same directories, a new process)."""
        directory = self.worker_dir(index)
        (directory / "work").mkdir(parents=True, exist_ok=True)
        (directory / "local").mkdir(parents=True, exist_ok=True)
        env = {**self.env, "SPARK_WORKER_DIR": str(directory / "work"),
               "SPARK_LOCAL_DIRS": str(directory / "local"), STATE_DIR_VARIABLE: str(directory / "state"),
               "SPARK_LOCAL_IP": self.address(f"worker-{index}")}
        self._workers[index] = self._spawn(f"worker-{index}", "org.apache.spark.deploy.worker.Worker", [
            "--host", self.address(f"worker-{index}"), "--cores", str(self.cores_per_worker),
            "--memory", self.worker_memory,
            "--work-dir", str(directory / "work"), "--webui-port", "0", self.master_url], env)

    def use_workers(self, indices: Sequence[int]) -> None:
        """Exactly workers ``indices`` running and registered: the others killed, the missing ones
        (killed by an earlier test of a cluster shared by several) started again."""
        for index in [i for i in self._workers if i not in indices]:
            self.kill_worker(index)
        for index in [i for i in indices if i not in self._workers]:
            self.start_worker(index)
        self._wait(lambda: self.alive_workers() == len(indices), f"workers {list(indices)} to register",
                   f"worker-{indices[-1]}")

    def _spawn(self, name: str, main_class: str, args: Sequence[str], env: Mapping[str, str]
               ) -> subprocess.Popen:
        with open(self.base_dir / f"{name}.log", "ab") as log:
            return subprocess.Popen(self._on_host(name, [str(SPARK_HOME / "bin" / "spark-class"), main_class,
                                                         *args]),
                                    env=dict(env), stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)

    def _master_state(self) -> dict | None:
        try:
            with urllib.request.urlopen(f"{self.master_ui_url}/json/", timeout=5) as response:
                return json.loads(response.read())
        except (OSError, ValueError):
            return None

    def alive_workers(self) -> int:
        """Workers the master counts as ALIVE (a killed one stays ALIVE until its heartbeat times out)."""
        state = self._master_state()
        return 0 if state is None else int(state.get("aliveworkers", 0))

    def _wait(self, ready: Callable[[], bool], what: str, log_name: str) -> None:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not ready():
            for name, process in [("master", self._master), *((f"worker-{i}", p)
                                                                for i, p in self._workers.items())]:
                if process is not None and process.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"Spark {name} exited with {process.returncode}:\n{self.log(name)}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"Timed out waiting for {what}:\n{self.log(log_name)}")
            time.sleep(0.5)

    def applications(self) -> list[str]:
        """Names of the applications the master ran or runs."""
        state = self._master_state() or {}
        return [app["name"] for key in ("activeapps", "completedapps") for app in state.get(key, [])]

    def log(self, name: str) -> str:
        """The last lines of ``<name>.log`` (``master``, ``worker-<i>``)."""
        path = self.base_dir / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-40:]) if path.exists() else ""

    def executor_logs(self, index: int) -> str:
        """stderr of every executor worker ``index`` ran (``work/<app>/<executor>/stderr``)."""
        return "\n".join(p.read_text(errors="replace") for p in sorted(
            (self.worker_dir(index) / "work").glob("*/*/stderr")))

    def worker_of(self, pid: int) -> int | None:
        """The worker that process ``pid`` (an executor's Python worker) descends from, if any (PySpark's
        daemon makes a process group of its own, so the ancestry decides, not the group)."""
        workers = {process.pid: i for i, process in self._workers.items()}
        while pid > 1 and pid not in workers:
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                return None
            pid = int(stat.rsplit(")", 1)[1].split()[1])  # the parent's pid, after the command's name
        return workers.get(pid)

    def kill_worker(self, index: int) -> None:
        """SIGKILL worker ``index`` with its executors and their Python workers (its process group)."""
        process = self._workers.pop(index)
        _kill_group(process, signal.SIGKILL)
        process.wait(timeout=30)

    def submit_command(self, app: str | Path, *args: str, conf: Mapping[str, str] | None = None,
                       py_files: Sequence[str] = (), archives: Sequence[str] = ()) -> list[str]:
        """The ``spark-submit`` command line for ``app`` on this cluster (client deploy mode)."""
        settings = {**self.driver_conf(), "spark.ui.enabled": "false", **(conf or {})}
        command = [str(SPARK_HOME / "bin" / "spark-submit"), "--master", self.master_url]
        for key, value in settings.items():
            command += ["--conf", f"{key}={value}"]
        if py_files:
            command += ["--py-files", ",".join(py_files)]
        if archives:
            command += ["--archives", ",".join(archives)]
        return self._on_host("driver", [*command, str(app), *args])

    def submit(self, app: str | Path, *args: str, timeout: float = 300.0,
               env: Mapping[str, str] | None = None, **options: object) -> subprocess.CompletedProcess:
        """Runs ``spark-submit`` to completion; stdout and stderr captured as text."""
        return subprocess.run(self.submit_command(app, *args, **options),  # type: ignore[arg-type]
                              env={**self.env, **(env or {})}, capture_output=True, text=True,
                              timeout=timeout)

    def submit_background(self, app: str | Path, *args: str, env: Mapping[str, str] | None = None,
                          output: Path | None = None, **options: object) -> subprocess.Popen:
        """Starts ``spark-submit`` and returns at once (stdout and stderr piped, text; or both written
        to ``output``, for a long run whose logs would fill a pipe nobody reads meanwhile)."""
        command = self.submit_command(app, *args, **options)  # type: ignore[arg-type]
        if output is None:
            return subprocess.Popen(command, env={**self.env, **(env or {})}, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, start_new_session=True)
        with open(output, "ab") as log:
            return subprocess.Popen(command, env={**self.env, **(env or {})}, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)

    def stop(self) -> None:
        """SIGTERM every worker and the master (with their children), SIGKILL what is left in time."""
        processes = [*self._workers.values(), *([self._master] if self._master else [])]
        for process in processes:
            _kill_group(process, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout_s
        for process in processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            _kill_group(process, signal.SIGKILL)  # executors and Python workers left in the group
            process.wait(timeout=30)
        self._workers.clear()
        self._master = None

    def __enter__(self) -> SparkCluster:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def without_this_venv(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with nothing that leads a process to this venv's Python or packages."""
    venv_bin = str(Path(sys.prefix) / "bin")
    path = os.pathsep.join(p for p in environ.get("PATH", "").split(os.pathsep) if p and p != venv_bin)
    dropped = {"PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"}
    return {**{k: v for k, v in environ.items() if k not in dropped}, "PATH": path}


def _kill_group(process: subprocess.Popen, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, sig)
