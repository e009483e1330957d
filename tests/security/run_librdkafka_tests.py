"""Run librdkafka's own security tests (0097, 0126, 0135, 0142; tests/security/librdkafka_suite.py says
how) by hand against a secured strom broker, or with ``--apache-kafka`` against a secured single-node
Apache Kafka from tests/support/apache_kafka.py: the baseline a strom broker result is judged by.
tests/security/test_librdkafka_suite.py runs them on strom broker in CI. It needs ``make librdkafka``:

    .venv/bin/python tests/security/run_librdkafka_tests.py
    .venv/bin/python tests/security/run_librdkafka_tests.py --apache-kafka

The last lines say which passed; docs/security.md has the results.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]  # tests/ (support, security) as pytest sees it

from security.librdkafka_suite import LIBRDKAFKA, apache_kafka, run_all, runs, ssl_files, strom_broker  # noqa: E402
from support.certificates import make_pki  # noqa: E402
from support.identity_provider import IdentityProvider  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--librdkafka", type=Path, default=LIBRDKAFKA, help="its built tree")
    parser.add_argument("--tests", default="0097,0126,0135,0142")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--keep", type=Path, help="write the test.conf files and logs here")
    parser.add_argument("--apache-kafka", action="store_true", help="run on secured Apache Kafka instead")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="strom-librdkafka-"))
    work.mkdir(parents=True, exist_ok=True)
    pki = make_pki(work / "pki")
    with IdentityProvider() as idp, ExitStack() as stack:
        at = (apache_kafka if args.apache_kafka else strom_broker)(stack, work, pki, idp)
        specs = [spec for spec in runs(at, pki, idp, ssl_files(pki, work / "ssl"))
                 if spec.test in args.tests.split(",")]
        by_test = run_all(specs, work, args.timeout, args.librdkafka.resolve())
    outcomes = [done for test_outcomes in by_test.values() for done in test_outcomes]
    for done in outcomes:
        print(f"--- {done.test} {done.subtests!r}: {done.verdict} in {done.seconds:.0f} s\n{done.tail()}\n")
    print(f"logs in {work}")
    for done in outcomes:
        print(f"{done.test} {done.subtests!r} {done.verdict} {done.seconds:.0f} s: {len(done.passed)} passed"
              f"{', skipped ' + '; '.join(done.skipped) if done.skipped else ''}"
              f"{', failed: ' + '; '.join(done.failures) if done.failures else ''}")
    return 0 if all(done.verdict != "FAILED" for done in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
