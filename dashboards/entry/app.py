"""What `servelens dashboard` hands to `streamlit run`: it runs dashboards/app.py, every time.

It lives in a directory of its own because Streamlit treats a `pages/` folder beside the main
script as a legacy multipage app until the first `st.navigation` call, and then serves
`/overview` or `/sql` by running that page's file directly, skipping app.py and its access
gate. With no `pages/` here, Streamlit always runs the main script first.
"""

from __future__ import annotations

import runpy
from pathlib import Path

runpy.run_path(str(Path(__file__).resolve().parent.parent / "app.py"), run_name="__main__")
