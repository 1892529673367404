"""The report's tail-latency section: how much of the p99 time to first token is queueing,
and what the queue was when the slow requests arrived (the `ttft_queueing` view).

Kept apart from report.py, which calls `tail_latency` while building the report and
`tail_latency_markdown` / `tail_latency_html` while rendering it."""

from __future__ import annotations

import html
from typing import Any

import duckdb

from .mdsafe import md_text

TAIL_LATENCY_ANCHOR = "tail-latency"
# a front-end delay below the clocks' resolution (the log's whole seconds, the client's run
# placed to the second) is not told apart from none
FRONTEND_SHOWN_S = 1.0
TAIL_LATENCY_TITLE = "Tail latency: how much of the p99 TTFT is queueing"


def tail_latency(con: duckdb.DuckDBPyConnection, instance: str | None = None) -> list[dict[str, Any]]:
    """One row of ttft_queueing per instance (all of them, or `instance`)."""
    sql = "select * from ttft_queueing" + (" where instance = ?" if instance is not None else "")
    rel = con.execute(sql + " order by instance, engine", [instance] if instance is not None else [])
    cols = [d[0] for d in rel.description]
    return [dict(zip(cols, r)) for r in rel.fetchall()]


def _s(v: Any) -> str:
    return "n/a" if v is None else f"{v:.3g} s"


def _n(v: Any) -> str:
    return "n/a" if v is None else f"{v:,.0f}"


def explain(row: dict[str, Any]) -> str:
    """One sentence on the tail TTFT of one instance."""
    source = {"client": "measured by the benchmark client", "server_log": "from the server log",
              "mixed": "from the client where it named the request, else the server log"}[row["ttft_source"]]
    est = " (estimated to the log's 1 s resolution)" if row["ttft_estimated"] else ""
    text = (f"p99 TTFT {_s(row['p99_ttft_s'])} (p50 {_s(row['p50_ttft_s'])}) over {row['n_requests']:,} requests, "
            f"{source}{est}.")
    front = row.get("frontend_at_p99_s")
    if front is not None and front >= FRONTEND_SHOWN_S:
        text += (f" {_s(front)} of it passed before the server logged the slow requests (client send to "
                 "`Received request`): time no engine metric shows, spent in the API server or a proxy in front of it.")
    share = row["queueing_share_p99"]
    if share is None:
        return text + " No request arrived to an empty queue, so the part due to queueing cannot be told apart."
    text += (f" About {share:.0%} of it ({_s(row['queueing_at_p99_s'])}) is queueing: requests that found no queue "
             f"got their first token after {_s(row['baseline_ttft_s'])}.")
    if row["slow_waiting_avg"] is not None:
        text += (f" The {row['n_slow']:,} slowest arrived while {_n(row['slow_waiting_avg'])} requests waited on "
                 f"average (at most {_n(row['slow_waiting_max'])}; {_n(row['all_waiting_avg'])} over all requests).")
    if share >= 0.5:
        text += " Tail latency here is a capacity problem: more replicas or a higher batch limit, not a faster model."
    return text


def tail_latency_markdown(rows: list[dict[str, Any]] | None) -> list[str]:
    """The `## Tail latency` section (nothing when no instance has a TTFT)."""
    if not rows:
        return []
    out = [f"## {TAIL_LATENCY_TITLE}", ""]
    out += [f"- **{md_text(r['instance'])}** ({md_text(r['engine'])}): {explain(r)}" for r in rows]
    return out + [""]



def tail_latency_html(rows: list[dict[str, Any]] | None) -> list[str]:
    """The same section for the HTML report: a table per instance, then each explanation
    (nothing when no instance has a TTFT)."""
    if not rows:
        return []
    e = html.escape
    head = ["instance", "engine", "TTFT from", "requests", "p50", "p90", "p99", "no-queue baseline",
            "before the server saw it", "queueing part of p99", "slow requests", "waiting at their arrival (avg / max)", "waiting, all requests (avg)"]
    body = [[r["instance"], r["engine"], r["ttft_source"], f"{r['n_requests']:,}", _s(r["p50_ttft_s"]),
             _s(r["p90_ttft_s"]), _s(r["p99_ttft_s"]), _s(r["baseline_ttft_s"]), _s(r.get("frontend_at_p99_s")),
             "n/a" if r["queueing_share_p99"] is None else f"{_s(r['queueing_at_p99_s'])} ({r['queueing_share_p99']:.0%})",
             _n(r["n_slow"]), f"{_n(r['slow_waiting_avg'])} / {_n(r['slow_waiting_max'])}", _n(r["all_waiting_avg"])]
            for r in rows]
    th = "".join(f"<th>{e(h)}</th>" for h in head)
    trs = "".join("<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in row) + "</tr>" for row in body)
    out = [f"<h2 id='{TAIL_LATENCY_ANCHOR}'>{e(TAIL_LATENCY_TITLE)}</h2>",
           f"<table><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>"]
    out += [f"<p><b>{e(r['instance'])}</b> ({e(r['engine'])}): {e(explain(r))}</p>" for r in rows]
    return out
