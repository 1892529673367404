"""Deep links on a fresh server. Streamlit decides once per server whether an app uses its
legacy `pages/` folder: until some session has run the entry point (dashboards/app.py, which
calls `st.navigation`), a request for `/overview` runs `pages/overview.py` alone in legacy
mode, with no page config (narrow layout) and the folder's raw file names in the sidebar
(`app / overview / sql`). `ensure_entry_point()` at the top of a page notices that it was
started alone, switches Streamlit to the entry point's navigation (exactly what
`st.navigation` does on its first call) and reruns, so a deep link gets the same page config,
page names and any gate of app.py as the root URL."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import streamlit as st

APP = (Path(__file__).resolve().parent / "app.py").resolve()


def _inside_entry_point() -> bool:
    """Whether app.py is on the call stack (it runs the pages through st.navigation)."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if name.endswith("app.py") and Path(name).resolve() == APP:
            return True
        frame = frame.f_back
    return False


def ensure_entry_point() -> None:
    if _inside_entry_point():
        return
    try:
        from streamlit.runtime.pages_manager import PagesManager
    except ImportError:  # another Streamlit layout: run the entry point in place
        runpy.run_path(str(APP), run_name="__main__")
        st.stop()
    PagesManager.uses_pages_directory = False
    st.rerun()
