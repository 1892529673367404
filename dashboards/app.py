"""The servelens dashboard's entry point: `servelens dashboard` runs
`streamlit run <this file> -- --store DIR`.

It sets up the page and hands over to the page the navigation picked: Overview (verdict
first, then the evidence) or SQL (ad-hoc read-only queries; absent when switched off). When
an access token is set, every page waits for it (dashboards/access.py). Each page draws the shared
sidebar filters itself through `sidebar.page_setup()` (so that a page rerun alone, as in a
live refresh or Streamlit's AppTest, still has them). It only reads the store.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st
from servelens.dashboards import access
from servelens.pipeline.report.mdsafe import md_text
from servelens.pipeline.query.sandbox import QueryError
from servelens.pipeline.store.manifest import StoreError

HERE = Path(__file__).resolve().parent

st.set_page_config(page_title="servelens", layout="wide")

# the access token (when `servelens dashboard` was given one) before anything reads the store
if not access.granted():
    st.stop()

pages = [
    st.Page(HERE / "pages" / "overview.py", title="Overview", default=True, url_path="home"),
    # Streamlit serves the default page at the root only, so a shared link to /overview would
    # say "Page not found" before falling back to it: the same page, hidden, answers there
    st.Page(HERE / "pages" / "overview.py", title="Overview", url_path="overview", visibility="hidden"),
]
if access.sql_enabled():
    pages.append(st.Page(HERE / "pages" / "sql.py", title="SQL", url_path="sql"))
page = st.navigation(pages)
try:
    page.run()
except (QueryError, StoreError) as e:  # one line on the page, never a traceback
    st.error(f"Cannot compute this page: {md_text(e)}")
