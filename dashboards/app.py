"""The servelens dashboard's entry point: `servelens dashboard` runs
`streamlit run <this file> -- --store DIR`.

It sets up the page and hands over to the page the navigation picked: Overview (verdict
first, then the evidence) or SQL (ad-hoc read-only queries). Each page draws the shared
sidebar filters itself through `sidebar.page_setup()` (so that a page rerun alone, as in a
live refresh or Streamlit's AppTest, still has them). It only reads the store.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

HERE = Path(__file__).resolve().parent

st.set_page_config(page_title="servelens", layout="wide")

page = st.navigation(
    [
        st.Page(HERE / "pages" / "overview.py", title="Overview", default=True, url_path="overview"),
        st.Page(HERE / "pages" / "sql.py", title="SQL", url_path="sql"),
    ]
)
page.run()
