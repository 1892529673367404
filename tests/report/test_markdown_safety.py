"""Log text stays text in Markdown: rendered by a real CommonMark parser (markdown-it-py,
with tables and strikethrough), a hostile error message, request id or file name gives no
link, image, raw HTML, emphasis or extra line, and reads back as the same characters."""

from __future__ import annotations

import html
import re

import pytest
from markdown_it import MarkdownIt
from typer.testing import CliRunner

from servelens.pipeline.cli.app import app, build_app
from servelens.pipeline.report.mdsafe import md_code, md_text, one_line

build_app()
runner = CliRunner()
md = MarkdownIt("commonmark").enable("table").enable("strikethrough")

HOSTILE = [
    "![tracker](http://evil.example/pixel.png) see [docs](http://evil.example/)",
    "<img src=x onerror=alert(1)> <script>alert(2)</script> &lt;b&gt;",
    "**bold** _em_ ~~gone~~ `code` a|b|c \\escape $x^2$ :red[alert]",
    "- a list\n# a heading\n> a quote",
    "12. numbered www.evil.example https://evil.example/x mail@evil.example",
    "file_name.log __init__ snake_case_name",
]
TAGS = re.compile(r"<(?!/?(p|td|th|tr|table|thead|tbody)\b)[a-z]")


def text_of(rendered: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", rendered)).strip()


@pytest.mark.parametrize("text", HOSTILE)
def test_md_text_renders_as_the_same_characters_and_no_markup(text):
    rendered = md.render(md_text(text))
    assert not TAGS.search(rendered), rendered
    assert rendered.count("<p>") == 1
    assert text_of(rendered) == one_line(text)


@pytest.mark.parametrize("text", HOSTILE + ["a `` b ` c", "`starts and ends`"])
def test_md_code_is_one_code_span_of_the_text(text):
    rendered = md.render(md_code(text))
    assert re.fullmatch(r"<p><code>[^<]*</code></p>\n", rendered), rendered
    assert text_of(rendered) == one_line(text)


def test_a_report_over_hostile_log_text_has_no_live_markup(tmp_path):
    message = "EngineCore failed: ![x](http://evil.example/p.png) <img src=x onerror=alert(1)> [click](http://evil.example)"
    log = tmp_path / "evil[1](http:x).log"
    log.write_text(
        "INFO 05-12 08:00:01 [loggers.py:123] Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg generation "
        "throughput: 3.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 3.0%, Prefix cache hit rate: 0.0%\n"
        f"ERROR 05-12 08:00:02 [core.py:708] {message}\n")
    store = tmp_path / "store"
    assert runner.invoke(app, ["ingest", str(log), "--store", str(store), "-q"]).exit_code == 0
    r = runner.invoke(app, ["report", "--store", str(store)])
    assert r.exit_code == 0, r.output
    rendered = md.render(r.stdout)
    assert "<img" not in rendered and "<a " not in rendered and "onerror" not in re.sub(r"&[a-z]+;", "", rendered.split("onerror")[0])
    assert "evil.example" in text_of(rendered)  # the text is there, as text
    # the instance name from the file name is text in its heading, not a link
    assert "<h3>evil[1](http:x)" in rendered
