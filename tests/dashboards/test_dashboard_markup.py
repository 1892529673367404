"""Log text on the dashboard stays text: an instance named (by `ingest --instance`, a pod's
name) with a Markdown image, link and HTML reaches the Overview's headline, verdicts and the
"not in the logs" notes, and the SQL page's error line; rendered by a real CommonMark parser
(markdown-it-py), no image, link or tag appears, and the name reads back whole."""

from __future__ import annotations

import html
import re
import subprocess
import sys
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from streamlit.testing.v1 import AppTest

APP = Path(__file__).resolve().parents[2] / "dashboards" / "app.py"
LOG = Path(__file__).resolve().parents[2] / "sample_logs" / "incident" / "vllm" / "vllm-a.log"
SERVELENS = Path(sys.executable).parent / "servelens"
NAME = "![px](http://evil.example/p.png)[docs](http://evil.example/)<img src=x>"
md = MarkdownIt("commonmark").enable("table").enable("strikethrough")


@pytest.fixture(autouse=True)
def _restore_main():
    main = sys.modules["__main__"]
    yield
    sys.modules["__main__"] = main


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = tmp_path_factory.mktemp("markup") / "store"
    with LOG.open("rb") as f:
        subprocess.run([str(SERVELENS), "ingest", "-", "--instance", NAME, "--store", str(s), "-q"], stdin=f,
                       check=True, capture_output=True)
    return s


def rendered(at: AppTest) -> list[str]:
    texts = [e.value for kind in ("markdown", "info", "error", "warning", "caption", "success")
             for e in getattr(at, kind)]
    return [md.render(t) for t in texts if isinstance(t, str)]


def test_an_instance_name_of_markup_is_shown_as_text(store, monkeypatch):
    monkeypatch.setenv("SERVELENS_STORE", str(store))
    for name in ("SERVELENS_DASHBOARD_TOKEN", "SERVELENS_DASHBOARD_SQL"):
        monkeypatch.delenv(name, raising=False)
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.run()
    assert not at.exception
    out = rendered(at)
    named = [h for h in out if "evil.example" in h]
    assert len(named) >= 3  # the headline, the verdict heading and a "not in the logs" note
    for h in out:
        assert "<img" not in h and "<a " not in h and "&lt;img" not in h.replace("&lt;img src=x&gt;", ""), h
    assert any(NAME in html.unescape(re.sub(r"<[^>]+>", "", h)) for h in named)

    at.switch_page("pages/sql.py").run()
    at.text_area(key="sql_query").input("select instance::int from events limit 1")  # quotes the name
    at.button[0].click().run()
    errors = [md.render(e.value) for e in at.error]
    assert len(errors) == 1 and "evil.example" in errors[0]
    assert "<img" not in errors[0] and "<a " not in errors[0]
