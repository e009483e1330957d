"""Runs benchmark cases one per fresh subprocess, this tree's code and a baseline commit's alternating.

Each case runs in its own Python process, so its peak RSS is its own (not the largest seen so far in a
long-lived process), and a baseline (``--baseline REV``) runs the *same* benchmark script with
``PYTHONPATH`` pointing at REV's ``src`` in a temporary git worktree: old and new code alternate run by
run in one session, so the machine's drift (up to 2x for seconds at a time on the shared VM) costs both
alike. A case's child prints one JSON line: ``{"wall": records/s over the whole run, "cpu": records/s of
the best commit interval in CPU seconds, "rss_mb": peak RSS}``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeat", type=int, default=3, help="rounds; every case runs once per round")
    parser.add_argument("--baseline", metavar="REV",
                        help="also run every case on REV's code (git worktree), alternating with this tree")
    parser.add_argument("--run", help=argparse.SUPPRESS)  # the child: one case, prints JSON


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def report(wall: float, cpu: float) -> None:
    """The child's answer: one JSON line on stdout."""
    print(json.dumps({"wall": wall, "cpu": cpu, "rss_mb": round(peak_rss_mb(), 1)}))


@contextmanager
def baseline_tree(rev: str | None) -> Iterator[Path | None]:
    """REV checked out (detached) into a temporary worktree, removed afterwards."""
    if rev is None:
        yield None
        return
    path = Path(tempfile.mkdtemp(prefix="strom-baseline-"))
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f", str(path), rev],
                   check=True, capture_output=True)
    try:
        yield path
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)],
                       check=False, capture_output=True)


def run_child(script: Path, argv: Sequence[str], src: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run([sys.executable, str(script), *argv], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} on {src} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def alternate(script: str, cases: dict[str, list[str]], repeat: int, baseline: str | None,
              reference: str | None = None) -> None:
    """Runs each case (label -> child argv) ``repeat`` times, new and baseline alternating, then prints
    per case the median and best whole-run wall-clock records/s, the best-interval CPU rate, the peak
    RSS and the new/old ratio of the wall-clock medians; with ``reference`` (a case's label), also each
    wall-clock median as a fraction of that case's on the same code."""
    path = Path(script).resolve()
    with baseline_tree(baseline) as old:
        trees = {"new": ROOT / "src"} | ({"old": old / "src"} if old is not None else {})
        results: dict[tuple[str, str], list[dict]] = {(c, t): [] for c in cases for t in trees}
        for _ in range(repeat):
            for label, argv in cases.items():
                for tree, src in trees.items():
                    results[(label, tree)].append(run_child(path, argv, src))
                    sys.stderr.write(".")
                    sys.stderr.flush()
        sys.stderr.write("\n")
    print(f"{'case':<44} {'code':<4} {'wall median':>12} {'wall best':>11} {'cpu best':>11} "
          f"{'peak RSS':>9}  new/old" + (f"  of {reference}" if reference else ""))
    for label in cases:
        medians = {}
        for tree in trees:
            runs = results[(label, tree)]
            medians[tree] = statistics.median(r["wall"] for r in runs)
            ratio = (f"  {medians['new'] / medians['old']:.2f}x"
                     if tree == "old" else "       ")
            if reference is not None:
                floor = statistics.median(r["wall"] for r in results[(reference, tree)])
                ratio += f"  {medians[tree] / floor:.2f}x"
            print(f"{label:<44} {tree:<4} {medians[tree]:>12,.0f} {max(r['wall'] for r in runs):>11,.0f} "
                  f"{max(r['cpu'] for r in runs):>11,.0f} {max(r['rss_mb'] for r in runs):>7,.0f}MB{ratio}")
