"""The SQL page: an ad-hoc read-only query over `events` and the metric views, the result as
a table with a CSV download, and the error in one line for a bad or refused query.

A visitor's query goes through the guarded path (data.run_user_sql -> query.run): checked,
run in DuckDB's sandbox on a connection of its own, within the dashboard's time and memory
limits, so it cannot read or write files, change what other visitors see, or hold the app.
The last result is kept in this visitor's session only, so a rerun (a download, a filter)
does not run the query again."""

from __future__ import annotations

import streamlit as st
from servelens.dashboards import access, data, sidebar
from servelens.pipeline.report.mdsafe import md_text
from servelens.pipeline.query.output import for_csv, formulas_as_text

MAX_ROWS_SHOWN = 10_000
EXAMPLE = "select instance, signal, severity, window_start, value, threshold\nfrom scaling_signals\norder by window_start"
_LAST = "_servelens_sql_last"

if not access.sql_enabled():
    st.info("The SQL page is switched off on this dashboard (servelens dashboard --no-sql).")
    st.stop()

cfg, _, _ = sidebar.page_setup()
limits = data.user_sql_limits()
st.title("SQL")
st.caption(
    "Read-only DuckDB SQL over `events` and the views of `sql/` (the same as `servelens sql`): "
    "SELECT, WITH, DESCRIBE, SHOW, SUMMARIZE, EXPLAIN. It reads this store's data and nothing else"
    + (f", and stops after {limits.timeout_s:g} s. " if limits.timeout_s else ". ")
    + "The sidebar filters do not apply here; the window width does not either (default "
    "`window_s` from the thresholds)."
)

with st.form("sql_form"):
    sql = st.text_area("Query", value=EXAMPLE, height=140, key="sql_query")
    submitted = st.form_submit_button("Run", type="primary")

if sql.strip():
    key = (sql, cfg.store, data.store_version(cfg.store))
    last = st.session_state.get(_LAST)
    if submitted or last is None or last[0] != key:
        try:
            last = (key, data.run_user_sql(cfg, sql), None)
        except data.QueryError as e:
            last = (key, None, str(e))
        except data.StoreError as e:
            last = (key, None, str(e))
        except Exception as e:  # anything else: its kind only, no traceback or text on a shared page
            last = (key, None, f"the query failed ({type(e).__name__}); try `servelens sql` for details")
        st.session_state[_LAST] = last
    _, result, error = last
    if error is not None:
        st.error(md_text(error))  # DuckDB's message can quote a value from the logs: text, not Markdown
    else:
        shown = result.head(MAX_ROWS_SHOWN)
        st.caption(
            f"{result.height:,} rows"
            + (f" (showing the first {MAX_ROWS_SHOWN:,}; the CSV has all)" if result.height > MAX_ROWS_SHOWN else "")
        )
        try:
            st.dataframe(shown, hide_index=True)
        except Exception:  # a type the table widget cannot draw: show it as the CSV text does
            st.dataframe(for_csv(shown), hide_index=True)
        st.download_button("Download CSV", formulas_as_text(for_csv(result)).write_csv(), file_name="servelens-query.csv", mime="text/csv")

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
        st.error(md_text(e))
