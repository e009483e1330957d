"""SubscriptionBuilder / ProcessorsBuilder: mistakes are reported before anything connects."""

import pytest

from strom.errors import ConfigError
from strom.tasks import ProcessorsBuilder, SubscriptionBuilder


def plain(context, task) -> None:
    pass


async def asynchronous(context, task) -> None:
    pass


def _build(processors: ProcessorsBuilder | None, config: dict):
    builder = SubscriptionBuilder.new_builder("s").consumer_config(config)
    if processors is not None:
        builder.processors_builder(processors)
    return builder.build()


@pytest.mark.parametrize(("processors", "config", "message"), [
    (None, {"bootstrap.servers": "127.0.0.1:1"}, "No processors"),
    (ProcessorsBuilder.consuming("t"), {"bootstrap.servers": "127.0.0.1:1"}, "No processor for topic 't'"),
    (ProcessorsBuilder.consuming("t").then_process(plain).then_process(asynchronous),
     {"bootstrap.servers": "127.0.0.1:1"}, "mixes async def and plain"),
    (ProcessorsBuilder.consuming("t").then_process(plain), {}, "bootstrap.servers"),
    (ProcessorsBuilder.consuming("t").then_process(plain),
     {"bootstrap.servers": "127.0.0.1:1", "enable.auto.commit": True}, "commits the offsets"),
])
def test_configuration_mistakes_are_clear_errors(processors, config, message) -> None:
    with pytest.raises(ConfigError, match=message):
        _build(processors, config)


def test_a_processor_must_be_callable() -> None:
    with pytest.raises(ConfigError, match="not a processor"):
        ProcessorsBuilder.consuming("t").then_process(42)
