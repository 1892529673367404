"""The servelens dashboard's entry point: `servelens dashboard` runs
`streamlit run <this file> -- --store DIR`.

It sets up the page, checks the store, draws the sidebar filters (shared by all pages) and
hands over to the page the navigation picked: Overview (verdict first, then the evidence) or
SQL (ad-hoc read-only queries). It only reads the store.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from servelens.dashboards import data, sidebar
from servelens.pipeline.store import StoreError

HERE = Path(__file__).resolve().parent

st.set_page_config(page_title="servelens", page_icon="🔭", layout="wide")

cfg = data.settings()
try:
    cat = data.catalog(cfg)
except (StoreError, data.QueryError) as e:
    st.error(f"Cannot read the store: {e}")
    st.stop()

page = st.navigation(
    [
        st.Page(HERE / "pages" / "overview.py", title="Overview", icon="🚦", default=True, url_path="overview"),
        st.Page(HERE / "pages" / "sql.py", title="SQL", icon="🧮", url_path="sql"),
    ]
)
st.session_state["servelens_spec"] = sidebar.render(cfg, cat)
page.run()
