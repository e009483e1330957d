"""strom: Kafka Streams, Decaton and Kafka exactly-once semantics in Python, run on Spark."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("strom")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
