"""The SQL page: an ad-hoc read-only query over `events` and the metric views, the result as
a table with a CSV download, and DuckDB's error in one line for a bad query."""

from __future__ import annotations

import streamlit as st
from servelens.dashboards import data, sidebar

MAX_ROWS_SHOWN = 10_000
EXAMPLE = "select instance, signal, severity, window_start, value, threshold\nfrom scaling_signals\norder by window_start"

cfg, _, _ = sidebar.page_setup()
st.title("SQL")
st.caption(
    "Read-only DuckDB SQL over `events` and the views of `sql/` (the same as `servelens sql`). "
    "The sidebar filters do not apply here; the window width does not either (default "
    "`window_s` from the thresholds)."
)

with st.form("sql_form"):
    sql = st.text_area("Query", value=EXAMPLE, height=140, key="sql_query")
    submitted = st.form_submit_button("Run", type="primary")

if sql.strip():
    try:
        result = data.run_user_sql(cfg, sql)
    except data.QueryError as e:
        st.error(str(e))
    else:
        shown = result.head(MAX_ROWS_SHOWN)
        st.caption(
            f"{result.height:,} rows"
            + (f" (showing the first {MAX_ROWS_SHOWN:,}; the CSV has all)" if result.height > MAX_ROWS_SHOWN else "")
        )
        st.dataframe(shown, hide_index=True)
        st.download_button("Download CSV", result.write_csv(), file_name="servelens-query.csv", mime="text/csv")

with st.expander("Views and their columns"):
    try:
        views = data.query(
            cfg,
            "select table_name as view, string_agg(column_name, ', ' order by ordinal_position) as columns "
            "from information_schema.columns where table_catalog <> 'temp' and not starts_with(table_name, '_') "
            "group by table_name order by table_name",
        )
        st.dataframe(views, hide_index=True)
    except data.QueryError as e:
        st.error(str(e))
