"""`strom run`'s start-up across processes (issue 42): the class-data-sharing archive that local drivers
share (two starts at once, a changed key), a driver killed and started again under exactly_once_v2, and
the JVM launched as the command begins (taken by its session, stopped when not)."""

from __future__ import annotations

import importlib.metadata
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from pyspark.find_spark_home import _find_spark_home

from strom.cli.spark_session import early_request
from strom.kafka import clients
from strom.spark import class_archive
from strom.spark.preflight import JavaRuntime, check_java
from support.processes import STROM
from support.word_count_app import APP, app_env, read_counts


def _env(tmp_path: Path, name: str, **variables: str) -> dict[str, str]:
    return app_env(tmp_path / name, name, **variables)


def _until_caught_up(tmp_path: Path, name: str, cache: Path, *options: str) -> subprocess.Popen:
    """`strom run` of the word count on its own embedded broker (no input: caught up at once)."""
    command = [STROM, "run", str(APP), "--master", "local[2]", "--until-caught-up", *options]
    return subprocess.Popen(command, env={**_env(tmp_path, name), "XDG_CACHE_HOME": str(cache)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _succeeds(*processes: subprocess.Popen) -> None:
    for process in processes:
        _, err = process.communicate(timeout=400)
        assert process.returncode == 0 and "caught up" in err, err[-3000:]


def _writers(directory: Path) -> dict[int, str]:
    """The JVMs writing an archive into ``directory`` (they write it as they exit, after `strom run`
    ended): process id and command line."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            line = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if f"-XX:ArchiveClassesAtExit={directory}" in line:
            found[int(entry.name)] = line
    return found


def _wait_for_writers(directory: Path, timeout_s: float = 400) -> None:
    deadline = time.monotonic() + timeout_s
    while _writers(directory):
        assert time.monotonic() < deadline, f"a JVM still writes an archive in {directory} ({timeout_s} s)"
        time.sleep(0.5)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.timeout(900)  # four starts of strom run, one or two JVMs writing an archive
def test_starts_at_once_share_one_archive_and_a_changed_key_rebuilds_it(tmp_path):
    cache = tmp_path / "cache"
    jvm = cache / "strom" / "jvm"
    key = class_archive.archive_key(check_java(), Path(_find_spark_home()))

    # two starts at once with no archive: neither breaks the other; each JVM writes its own .part at its
    # exit, unless the other's JVM was already running when the second start looked
    _succeeds(_until_caught_up(tmp_path, "first", cache), _until_caught_up(tmp_path, "second", cache))
    _wait_for_writers(jvm)
    assert list(jvm.glob(f"spark-{key}.*.jsa.part")), list(jvm.iterdir())

    # the next start adopts one (renamed into place) and removes the other
    _succeeds(_until_caught_up(tmp_path, "third", cache))
    assert sorted(path.name for path in jvm.iterdir()) == [f"spark-{key}.jsa"]

    # "pyspark upgraded": the archive on disk is another key's; a JVM killed while writing left a
    # headerless .part of this key. The start still works, removes the .part and rebuilds: its JVM
    # writes a new .part of this key as it exits (stopped here: its writing was shown above)
    (jvm / f"spark-{key}.jsa").rename(jvm / "spark-0123456789abcdef.jsa")
    (jvm / f"spark-{key}.0badf00d.jsa.part").write_bytes(bytes(4096))
    _succeeds(_until_caught_up(tmp_path, "upgraded", cache))
    writers = _writers(jvm)
    for pid in writers:
        os.kill(pid, signal.SIGKILL)
    rebuilding = [line for line in writers.values() if f"spark-{key}." in line]
    assert rebuilding or list(jvm.glob(f"spark-{key}.*.jsa.part")), list(jvm.iterdir())
    assert not (jvm / f"spark-{key}.0badf00d.jsa.part").exists()
    assert (jvm / "spark-0123456789abcdef.jsa").exists()


def test_no_archive_when_the_user_chooses_class_sharing_or_the_jdk_has_no_base_archive(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    java, spark_home = check_java(), Path(_find_spark_home())
    assert class_archive.driver_java_options(java, spark_home).startswith("-XX:ArchiveClassesAtExit=")
    assert class_archive.driver_java_options(java, spark_home, user_options="-Xshare:off") == ""
    bare_jdk = JavaRuntime(str(tmp_path / "jdk" / "bin" / "java"), java.major, java.version)
    assert class_archive.driver_java_options(bare_jdk, spark_home) == ""


def test_a_jar_installed_again_gives_another_archive_key(tmp_path):
    """A virtualenv made again at the same path has the same jars with new modification times, which
    the JVM compares with its archive's (refusing it, silently): the key changes with them."""
    java, home = check_java(), tmp_path / "pyspark"
    (home / "jars").mkdir(parents=True)
    jar = home / "jars" / "spark-core_2.13-4.0.0.jar"
    jar.write_bytes(b"classes")
    key = class_archive.archive_key(java, home)
    assert class_archive.archive_key(java, home) == key
    os.utime(jar, (time.time() - 60, time.time() - 60))  # the same bytes, installed again
    assert class_archive.archive_key(java, home) != key


def test_pyspark_without_metadata_is_keyed_by_its_version_file_not_imported(monkeypatch):
    """A SPARK_HOME's python/ on PYTHONPATH has no installed metadata: the key reads its version.py
    (the launch's thread must not import pyspark while the command does)."""
    import pyspark

    def no_metadata(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", no_metadata)
    monkeypatch.delitem(sys.modules, "pyspark")
    assert class_archive._pyspark_version() == pyspark.__version__
    assert "pyspark" not in sys.modules


def test_a_start_removes_archives_unused_for_a_week_unless_a_process_names_them(tmp_path, monkeypatch):
    """Another pyspark's archive unused for a week and a .part no JVM writes go; this key's archive, a
    recently used one, and a file a running JVM maps (named on its command line) stay."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    java, spark_home = check_java(), Path(_find_spark_home())
    jvm = class_archive.cache_directory()
    jvm.mkdir(parents=True)
    key = class_archive.archive_key(java, spark_home)
    week, day = class_archive.STALE_AFTER_S, 24 * 3600.0
    ages = {f"spark-{key}.jsa": 2 * week, "spark-00000000000000aa.jsa": week + day,
            "spark-00000000000000bb.jsa": week - day, "spark-00000000000000cc.jsa": 2 * week,
            "spark-00000000000000dd.1234abcd.jsa.part": 2 * 3600.0,
            "spark-00000000000000ee.1234abcd.jsa.part": 600.0}
    now = time.time()
    for name, age in ages.items():
        (jvm / name).write_bytes(b"")
        os.utime(jvm / name, (now - age, now - age))
    (jvm / f"spark-{key}.jsa").write_bytes(next(iter(class_archive._MAGIC)))
    mapping = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                                f"-XX:SharedArchiveFile={jvm / 'spark-00000000000000cc.jsa'}"])
    try:
        options = class_archive.driver_java_options(java, spark_home)
    finally:
        mapping.kill()
        mapping.wait()
    assert options.startswith(f"-XX:SharedArchiveFile={jvm / f'spark-{key}.jsa'} ")
    assert sorted(path.name for path in jvm.iterdir()) == sorted(
        [f"spark-{key}.jsa", "spark-00000000000000bb.jsa", "spark-00000000000000cc.jsa",
         "spark-00000000000000ee.1234abcd.jsa.part"])
    assert time.time() - (jvm / f"spark-{key}.jsa").stat().st_mtime < 60  # marked used


def _marked(mark: str) -> dict[int, str]:
    """The processes whose environment holds ``STROM_TEST_MARK=mark``: process id and command line."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            if f"STROM_TEST_MARK={mark}".encode() in (entry / "environ").read_bytes().split(b"\0"):
                found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError):
            continue
    return found


def _drivers(processes: dict[int, str]) -> list[int]:
    """The Spark driver JVMs among ``processes`` (not the launcher JVM that builds their command)."""
    return [pid for pid, line in processes.items()
            if "org.apache.spark.deploy.SparkSubmit" in line and "launcher.Main" not in line]


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_session_takes_the_jvm_launched_as_the_command_began(tmp_path):
    command = [STROM, "-vv", "run", str(APP), "--master", "local[2]", "--until-caught-up",
               "--spark-conf", "spark.sql.shuffle.partitions=3"]
    result = subprocess.run(command, env=_env(tmp_path, "early"), capture_output=True, text=True, timeout=500)
    assert result.returncode == 0 and "caught up" in result.stderr, result.stderr[-3000:]
    assert "phase jvm-gateway" in result.stderr and "early JVM" in result.stderr, result.stderr[-3000:]
    assert "phase jvm-warmed" in result.stderr, result.stderr[-3000:]  # every warm-up piece ran


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.timeout(600)
def test_a_jvm_launched_before_the_command_set_a_variable_is_not_taken(tmp_path):
    """An application's build() that sets a variable for its Python workers (they inherit the JVM's
    environment): the early JVM, launched without it, is stopped and the session launches its own."""
    mark = uuid.uuid4().hex
    script = ("import os, time; import strom.spark; from strom.spark import driver_jvm\n"
              "driver_jvm.launch('local[2]')\n"
              "os.environ['STROM_TEST_LATER'] = 'set'\n"
              "spark = strom.spark.session(master='local[2]', strom_format=False)\n"
              "print(spark.sparkContext._jvm.System.getenv('STROM_TEST_LATER'), flush=True)\n"
              "time.sleep(60)\n")
    session = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "STROM_TEST_MARK": mark},
                               stdout=subprocess.PIPE, text=True)
    try:
        assert session.stdout is not None and session.stdout.readline().strip() == "set"
        assert len(_drivers(_marked(mark))) == 1, _marked(mark)  # its own; the early one stopped
    finally:
        session.kill()
        session.wait()


@pytest.mark.parametrize(("args", "request_"), [
    (["run", "app.py"], ("local[*]", {}, True)),
    (["-vv", "demo", "--records", "10"], ("local[2]", {}, False)),
    (["--verbose", "run", "app.py", "--master=local[3]", "--spark-conf", "spark.a = x=y ",
      "--spark-conf=spark.b=1", "--config", "--master"],
     ("local[3]", {"spark.a": "x=y", "spark.b": "1"}, False)),
    (["run", "--help"], None), (["topics", "list"], None), (["--version"], None), ([], None)])
def test_the_early_launch_asks_what_the_command_line_gives_the_session(args, request_):
    assert early_request(args) == request_


RUNTIME_WHILE_THE_SESSION_STARTS = """
from strom.cli.spark_session import spark_session_starting
session = spark_session_starting("strom-imports", strom_format=False)
from strom.spark.runtime import SparkStreams
print(type(session.exception(timeout=60)).__name__, SparkStreams.__name__)
"""


def test_a_command_imports_the_runtime_while_its_session_starts():
    """A fresh interpreter starts the session's thread and imports the runtime at once (``strom demo``
    on a named cluster): neither import meets pyspark half imported by the other. Without Java the
    session fails right after its imports, so no JVM is needed."""
    environment = {key: value for key, value in os.environ.items() if key != "JAVA_HOME"}
    result = subprocess.run([sys.executable, "-c", RUNTIME_WHILE_THE_SESSION_STARTS], capture_output=True,
                            text=True, timeout=120, env={**environment, "PATH": "/nonexistent"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["JavaNotFoundError", "SparkStreams"]


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_command_failing_before_its_session_leaves_no_jvm(tmp_path):
    """`strom run` of an app that fails to load: its early JVM (launched or launching) does not outlive it."""
    mark = uuid.uuid4().hex
    app = tmp_path / "app.py"
    app.write_text("import time\ndef build():\n    time.sleep(3)\n    raise ValueError('no')\n")
    result = subprocess.run([STROM, "run", str(app)], env={**os.environ, "STROM_TEST_MARK": mark},
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert _drivers(_marked(mark)) == []
    deadline = time.monotonic() + 60  # the early daemon sees its standard input end after its imports
    while _marked(mark):
        assert time.monotonic() < deadline, _marked(mark)
        time.sleep(0.5)


def _driver(tmp_path: Path, app_id: str, bootstrap: str, topics: dict[str, str],
            *options: str) -> subprocess.Popen:
    """`strom run` in its own process group (a kill of the group is the driver machine's crash)."""
    command = [STROM, "run", str(APP), "--bootstrap-servers", bootstrap, "--master", "local[2]", *options]
    return subprocess.Popen(command, env=_env(tmp_path, app_id, **topics), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _produce(bootstrap: str, topic: str, lines: range) -> None:
    producer = clients.producer(bootstrap)
    for i in lines:
        producer.produce(topic, f"w{i % 50} w{i % 7}".encode(), str(i).encode())
    assert producer.flush(60) == 0


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.broker
@pytest.mark.timeout(900)  # two starts of strom run
def test_a_driver_killed_while_processing_and_started_again_counts_exactly(broker, tmp_path):
    """SIGKILL of the driver's process group (driver, JVM, Python workers) mid-stream, more input while
    it is down, `strom run` again with the same application.id and state.dir: every word counted once."""
    suffix = uuid.uuid4().hex[:8]
    topics = {"lines": f"restart-lines-{suffix}", "counts": f"restart-counts-{suffix}"}
    bootstrap = broker.bootstrap_servers
    clients.create_topics(bootstrap, {topics["lines"]: 2, topics["counts"]: 2})
    first, more = range(20_000), range(20_000, 30_000)
    _produce(bootstrap, topics["lines"], first)
    driver = _driver(tmp_path, f"restart-{suffix}", bootstrap, topics)
    try:
        deadline = time.monotonic() + 300
        while not read_counts(bootstrap, topics["counts"], 1) and time.monotonic() < deadline:
            assert driver.poll() is None, driver.stderr.read()[-3000:] if driver.stderr else ""
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
    _produce(bootstrap, topics["lines"], more)
    again = _driver(tmp_path, f"restart-{suffix}", bootstrap, topics, "--until-caught-up")
    _, err = again.communicate(timeout=400)
    assert again.returncode == 0 and "caught up" in err, err[-3000:]
    expected = Counter(word for i in (*first, *more) for word in (f"w{i % 50}", f"w{i % 7}"))
    assert read_counts(bootstrap, topics["counts"], 60) == dict(expected)
