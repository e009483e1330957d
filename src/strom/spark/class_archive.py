"""A class-data-sharing (AppCDS) archive of the local driver JVM's classes, made once and reused.

A local Spark driver loads some 15,000 classes (the JDK's, Scala's, Spark's) from 280 jars at every
start: parsed, verified and linked again each time. With an archive the JVM maps them ready-made.
The first local session without one runs with ``-XX:ArchiveClassesAtExit``: its JVM writes the
archive when it exits (after strom's process, seconds of one core, once). The next start adopts that
file under its final name and maps it.

The archive is keyed to what made it: the Java runtime, pyspark's version and directory, and the
driver's class path (the jars' names, sizes and modification times); a change of any gives another
key, so another archive. The JVM checks the same itself and ignores, silently, an archive whose jars
differ: a key without the jars' times kept a reinstalled pyspark (a virtualenv made again at the same
path) on an archive its JVM refused at every start, mapping nothing.

Two starts at once are safe: each JVM writes its own ``.part`` file (none when another JVM is already
writing the key's), and a finished one is renamed into place atomically (the first start to see it
wins; the others are removed). Only a JVM that strom launches itself for a ``local``
master, on Linux, gets these options: ``spark-submit`` and cluster drivers never do.

Each start marks its key's archive used (its modification time); an archive of another key not used
for ``STALE_AFTER_S`` (an earlier pyspark, a removed virtualenv: 150 MB each) and an unfinished
``.part`` no JVM writes any more are removed, unless a running process names them (a JVM mapping or
writing one).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import logging
import os
import re
import sys
import time
import uuid
from pathlib import Path

from strom.spark.preflight import JavaRuntime

__all__ = ["STALE_AFTER_S", "archive_key", "cache_directory", "driver_java_options", "prune"]

log = logging.getLogger(__name__)

_PART = ".part"
_QUIET = "-Xlog:cds*=off"  # which classes CDS cannot take is not the user's concern
_USER_CHOICES = ("Xshare", "SharedArchiveFile", "ArchiveClassesAtExit", "DumpLoadedClassList")
_MAGIC = {0xF00BABA8.to_bytes(4, "little"), 0xF00BABA8.to_bytes(4, "big")}  # a dynamic archive's header
STALE_AFTER_S = 7 * 24 * 3600.0
"""Another key's archive unused this long is removed (a key in use is marked at every start)."""
_ORPHAN_PART_AFTER_S = 3600.0
"""Another key's ``.part`` that no JVM writes, this old, was left by a JVM killed while writing or by
a start its key never saw again."""


def cache_directory() -> Path:
    """``$XDG_CACHE_HOME/strom/jvm`` (``~/.cache/strom/jvm``)."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "strom" / "jvm"


def archive_key(java: JavaRuntime, spark_home: Path, class_path: str = "") -> str:
    """A digest of the Java runtime, pyspark's version and place, and the driver's class path (each
    jar's size and modification time, which the JVM compares with the archive's)."""
    digest = hashlib.sha256()
    jars = sorted((spark_home / "jars").glob("*.jar"))
    # the archive records the class path's jars by path: another install of the same pyspark (another
    # virtualenv) gets its own key, not an archive its JVM would refuse (and then share nothing at all)
    for part in (java.version, os.path.realpath(java.executable), _pyspark_version(),
                 os.path.realpath(spark_home), class_path,
                 *(f"{jar.name}:{stat.st_size}:{stat.st_mtime_ns}" for jar in jars
                   for stat in [jar.stat()])):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()[:16]


def driver_java_options(java: JavaRuntime, spark_home: Path, class_path: str = "",
                        user_options: str = "") -> str:
    """The options that map this key's archive, or that make the JVM write it when there is none yet
    (and no other JVM is writing it); "" when the user's options choose class sharing themselves, the
    JDK has no base archive (``-XX:ArchiveClassesAtExit`` would stop the JVM), or the cache directory
    cannot be written or has a blank or a quote in its path."""
    directory = cache_directory()
    if (not sys.platform.startswith("linux") or any(choice in user_options for choice in _USER_CHOICES)
            or not _base_archives(java) or any(c.isspace() or c in "'\"" for c in str(directory))):
        return ""  # on Linux, which /proc shows the JVMs writing; a path Spark's option split keeps whole
    try:
        directory.mkdir(parents=True, exist_ok=True)
        name = f"spark-{archive_key(java, spark_home, class_path)}"
        archive = directory / f"{name}.jsa"
        parts = list(directory.glob(f"{name}.*.jsa{_PART}"))
        running = _command_lines() if parts else ""
        writing = [part for part in parts if str(part) in running]
        adopted = _adopt_finished([part for part in parts if part not in writing], archive)
        prune(directory, name)
        if adopted:
            os.utime(archive)  # used now: no other key's start prunes it
            return f"-XX:SharedArchiveFile={archive} {_QUIET}"
        if writing:
            return ""  # another start's JVM writes this archive when it exits: no second copy
        part = directory / f"{name}.{uuid.uuid4().hex[:8]}.jsa{_PART}"
        return f"-XX:ArchiveClassesAtExit={part} {_QUIET}"
    except OSError as error:  # a read-only home, a full disk: start without the archive
        log.debug("no class-data-sharing archive: %s", error)
        return ""


def _pyspark_version() -> str:
    """pyspark's version, from its installed metadata, else from its ``version.py`` read as text: never
    imported here (it takes a while, and the early launch's thread must not import pyspark while the
    command does: ``strom.cli.spark_session``)."""
    try:
        return importlib.metadata.version("pyspark")
    except importlib.metadata.PackageNotFoundError:  # a SPARK_HOME's python/ on PYTHONPATH
        spec = importlib.util.find_spec("pyspark")
        places = spec.submodule_search_locations if spec is not None else None
        source = (Path(places[0]) / "version.py").read_text() if places else ""
        found = re.search(r"""__version__(?:: *str)? *= *["']([^"']+)["']""", source)
        return found.group(1) if found else "unknown"


def prune(directory: Path, keep: str) -> list[Path]:
    """Removes the other keys' archives unused for ``STALE_AFTER_S`` and their ``.part`` files older
    than an hour; never one of key ``keep`` nor a file a running process names (a JVM mapping or
    writing it). A start of a stale key at this very moment finds no archive and runs without one
    (the JVM ignores a missing file): slower once, never wrong."""
    now = time.time()
    stale = []
    for path in directory.glob("spark-*.jsa*"):
        limit = STALE_AFTER_S if path.suffix == ".jsa" else _ORPHAN_PART_AFTER_S
        try:
            if not path.name.startswith(f"{keep}.") and now - path.stat().st_mtime > limit:
                stale.append(path)
        except FileNotFoundError:
            continue  # a concurrent start removed or adopted it
    running = _command_lines() if stale else ""
    removed = [path for path in stale if str(path) not in running]
    for path in removed:
        path.unlink(missing_ok=True)
        log.debug("removed unused class-data-sharing archive %s", path)
    return removed


def _base_archives(java: JavaRuntime) -> bool:
    """The JDK's own archives (with and without compressed pointers), on which the dynamic one sits."""
    server = Path(os.path.realpath(java.executable)).parent.parent / "lib" / "server"
    return all((server / name).is_file() for name in ("classes.jsa", "classes_nocoops.jsa"))


def _adopt_finished(finished: list[Path], archive: Path) -> bool:
    """Renames a complete finished ``.part`` into ``archive`` unless it exists; removes the rest (a
    JVM killed while writing leaves its header unwritten: HotSpot writes it last)."""
    for part in finished:
        try:
            if not archive.exists() and _complete(part):
                os.replace(part, archive)  # atomic: a concurrent start sees no archive or this one
                log.debug("class-data-sharing archive %s", archive)
            else:
                part.unlink()
        except FileNotFoundError:
            continue  # a concurrent start took it
    return archive.exists()


def _complete(part: Path) -> bool:
    with part.open("rb") as file:
        return file.read(4) in _MAGIC


def _command_lines() -> str:
    """Every process's command line (Linux's /proc), to see which archives are still being written."""
    lines = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                lines.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
            except OSError:
                continue
    return "\n".join(lines)
