"""`strom streams describe APP`: the topology of a `strom run` application as text, Mermaid, DOT or SVG
(Graphviz's `dot`, which `make tools` installs), and a clear error without Graphviz."""

from __future__ import annotations

import html
import re
import shutil
from pathlib import Path

import pytest

from cli.strom_cli import Strom

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "tests" / "streams" / "processor" / "enrichment_app.py"


@pytest.fixture
def strom(monkeypatch, capsysbinary) -> Strom:
    return Strom("127.0.0.1:1", monkeypatch, capsysbinary)  # describe connects to nothing


def _topology():
    from streams.processor.enrichment_app import build

    return build()[0].describe()


def test_text_is_describe_as_kafka_prints_it(strom):
    assert strom.ok("streams", "describe", str(APP)).out.decode() == str(_topology())


@pytest.mark.parametrize(("fmt", "render"), [("mermaid", "to_mermaid"), ("dot", "to_dot")])
def test_graph_formats_print_the_description_s_graph(strom, fmt, render):
    out = strom.ok("streams", "describe", str(APP), "--format", fmt, "--config", "num.stream.threads=2").out
    assert out.decode() == getattr(_topology(), render)()


def test_svg_is_drawn_by_graphviz(strom):
    assert shutil.which("dot"), "Graphviz's dot is missing: `make tools` installs it"
    svg = strom.ok("streams", "describe", str(APP), "--format", "svg").out.decode()
    assert svg.lstrip().startswith("<?xml") and "</svg>" in svg
    titles = {html.unescape(title) for title in re.findall(r"<title>(.*?)</title>", svg)}
    assert {"cluster_0", "cluster_1", "cluster_2", "topic:orders", "store:last-seen",
            "node:KSTREAM-PROCESSOR-0000000008"} <= titles
    assert "node:KSTREAM-PROCESSOR-0000000008->store:last-seen" in titles  # the store's link


def test_svg_without_graphviz_says_what_to_install(strom, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    result = strom.run("streams", "describe", str(APP), "--format", "svg")
    assert result.code != 0 and result.out == b""
    assert "needs Graphviz's `dot` on PATH" in result.err and "apt-get install graphviz" in result.err


def test_a_bad_config_or_app_fails_in_one_line(strom):
    assert "num.stream.threads" in strom.fails("streams", "describe", str(APP), "--config",
                                               "num.stream.threads=many")
    assert "does not exist" in strom.fails("streams", "describe", "missing_app.py")
