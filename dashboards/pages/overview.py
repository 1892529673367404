"""The Overview page: the scaling verdict per instance with the signals behind it first, then
the evidence over time (queue, batch fill, KV cache, latency, throughput, errors) and the
slowest requests. Where the logs cannot give a metric, the reason stands in place of the
chart. In live mode the page body is a fragment that reruns itself; the sidebar (and so the
filters) is not rerun and keeps its state."""

from __future__ import annotations

import datetime as dt

import polars as pl
import streamlit as st
from servelens.pipeline.report import chart_specs as charts
from servelens.dashboards import data, sidebar
from servelens.pipeline.report import verdict as vd
from servelens.pipeline.report.mdsafe import md_text

UTC = dt.timezone.utc

# queue_depth.source values, in words
QUEUE_SOURCE = {
    "logged": "logged by the engine",
    "derived": "derived from logged counts (active - scheduled), estimated",
    "reconstructed": "reconstructed from request intervals, estimated",
}

# metric_availability names of the metrics each section needs
METRIC_LABEL = {
    "waiting": "Queue depth",
    "running": "Running requests",
    "fill": "Batch fill",
    "kv_usage": "KV-cache usage",
    "preemptions": "Preemptions",
    "e2e_s": "End-to-end latency",
    "ttft_s": "Time to first token",
    "tpot_s": "Time per output token",
    "queue_s": "Queue time",
    "gen_tps": "Generation throughput (logged)",
}


def _t(ts: dt.datetime | None, with_date: bool = False) -> str:
    if ts is None:
        return "?"
    ts = ts.astimezone(UTC)
    return ts.strftime("%Y-%m-%d %H:%M:%S UTC" if with_date else "%H:%M:%S")


def no_none(df: pl.DataFrame) -> pl.DataFrame:
    """The frame as a table shows it: a column with missing values becomes text with `-`
    where the log said nothing (a grid would print a literal `None`); full columns keep
    their type (and so their sorting and number format)."""
    cols = []
    for name, dtype in df.schema.items():
        col = pl.col(name)
        if df[name].null_count() == 0:
            cols.append(col)
        elif isinstance(dtype, pl.Datetime):
            cols.append(col.dt.convert_time_zone("UTC").dt.strftime("%Y-%m-%d %H:%M:%S%.3f").fill_null("-"))
        elif dtype.is_float():
            cols.append(col.round(4).cast(pl.String).fill_null("-"))
        else:
            cols.append(col.cast(pl.String).fill_null("-"))
    return df.select(cols)


def table(df: pl.DataFrame, key: str, **kwargs) -> None:
    """`df` as a table. Streamlit sends a pyarrow table as it is; a polars frame it converts
    through pandas, whose import alone would be a large part of the first page's server CPU
    (nothing else on the page needs pandas)."""
    st.dataframe(df.to_arrow(), hide_index=True, key=key, **kwargs)


def _dom(f: data.Filters) -> list[str]:
    return charts.time_domain(f.start, f.end)


def _missing(metric: str, have: set[tuple[str, str]], f: data.Filters, avail: pl.DataFrame) -> list[str]:
    """One line per selected instance that has no value of `metric`, with the reason."""
    lines = []
    # the metric's row per engine, looked up once (not filtered again for each instance)
    rows: dict[str, dict] = {}
    for r in avail.filter(pl.col("metric") == metric).iter_rows(named=True):
        rows.setdefault(r["engine"], r)
    for engine, instance in f.targets:
        if (engine, instance) in have or engine == "unknown":
            continue
        row = rows.get(engine)
        if row is None:
            reason = f"servelens knows no source of this metric in {engine} logs"
        elif not row["available"]:
            reason = row["reason"]
        else:
            reason = "no values in the selected time range"
        lines.append(f"- **{md_text(instance)}** ({md_text(engine)}): {reason}")  # reason: our own text (sql/), Markdown
    return lines


def _have(df: pl.DataFrame, col: str) -> set[tuple[str, str]]:
    if df.is_empty() or col not in df.columns:
        return set()
    return set(df.drop_nulls(col).select("engine", "instance").unique().rows())


def draw(build, df: pl.DataFrame, *args, **kwargs) -> None:
    """The chart `build(df, *args, **kwargs)` (a builder of charts.py), its spec built once per
    content (charts.vega_spec): a rerun with the same frames builds no chart."""
    st.vega_lite_chart(spec=charts.vega_spec(build, df, *args, **kwargs), width="stretch")


def evidence(title: str, metric: str, df: pl.DataFrame, col: str, f: data.Filters, avail: pl.DataFrame, build,
             *args, **kwargs) -> bool:
    """Draw the chart `build(df, *args, **kwargs)` when any selected instance has values, and
    say in words which instances have none and why. Returns whether there is a chart (drawn
    unless `build` is None: a closed tab's)."""
    have = _have(df, col)
    missing = _missing(metric, have, f, avail)
    drawn = bool(have)
    if drawn and build is not None:
        draw(build, df, *args, **kwargs)
    if missing:
        head = f"**{title}: not in the logs**" if not drawn else f"**{title}: not available for every instance**"
        st.info("\n".join([head, *missing]), icon=":material/info:")
    if drawn and (said := _scraped_sources(metric, have, avail)):
        st.caption(f"Values by source (log: the log's lines; scrape: the server's /metrics): {said}")
    return drawn


def _scraped_sources(metric: str, have: set[tuple[str, str]], avail: pl.DataFrame) -> str:
    """metric_availability's sources of `metric`, per engine drawn, when the server's /metrics
    gave some of them."""
    if "sources" not in avail.columns:
        return ""
    engines = sorted({e for e, _ in have})
    rows = avail.filter((pl.col("metric") == metric) & pl.col("engine").is_in(engines)
                        & pl.col("sources").str.contains("scrape", literal=True))
    return "; ".join(f"{md_text(r['engine'])}: {md_text(r['sources'])}" for r in rows.iter_rows(named=True))


def _signal_line(r: dict, th: dict) -> str:
    sev = vd.SEVERITY_BADGE.get(r["severity"], r["severity"])
    unit = "" if vd.shows_unit(r["unit"]) else f" {r['unit']}"
    est = " (estimated)" if r["estimated"] else ""
    until = "end of log" if r["ongoing"] else _t(r["window_end"])
    return (f"{sev} **{vd.SIGNAL_TITLE.get(r['signal'], r['signal'])}** `{r['signal']}` → {vd.action_of(r['signal'])}  \n"
            f"**{vd.format_value(r['value'], r['unit'])}**{unit}{est} · "
            f"{vd.threshold_text(r['signal'], r['threshold'], r['unit'], th.get('errors_count'))} · "
            f"{_t(r['window_start'])}→{until} UTC ({r['duration_s'] / 60:g} min)")


def _with_data(cfg: data.Settings, f: data.Filters) -> set[tuple[str, str]]:
    """The selected instances with at least one event in the range."""
    cat = data.catalog(cfg)
    utc = {c: pl.col(c).dt.convert_time_zone("UTC") for c in ("first_ts", "last_ts")}
    live = cat.filter((utc["last_ts"] >= pl.lit(f.start).dt.convert_time_zone("UTC"))
                      & (utc["first_ts"] < pl.lit(f.end).dt.convert_time_zone("UTC")))
    return set(live.select("engine", "instance").unique().rows())


def fleet_section(cfg: data.Settings, f: data.Filters, results, episodes: pl.DataFrame) -> None:
    """The first screen: what happened to the fleet in one paragraph, then one line per
    verdict (the worst first) and the impact in numbers."""
    story = data.fleet_story(cfg, f, episodes, {(e, i): v for e, i, v, _ in results})
    st.header("Fleet summary")
    box = st.error if story["crashed"] else st.warning if any(v in (vd.SCALE_OUT, vd.ROUTE_BETTER, vd.INVESTIGATE) for _, _, v, _ in results) else st.info
    box(md_text(story["headline"]), icon=":material/summarize:")
    died = {c["instance"]: c for c in story["crashed"]}
    lines = []
    for verdict, instances in vd.fleet_lines(results):
        names = [f"{md_text(i)} (crashed, {died[i]['failed'] or 0} failed)" if i in died else md_text(i) for i in instances]
        lines.append(f"- {vd.VERDICT_BADGE[verdict]} **{len(instances)}**: {', '.join(names)}")
    st.markdown("\n".join(lines))
    imp = story["impact"]
    p = data.peaks(cfg, f)
    c = st.columns(6)
    c[0].metric("Crashed instances", f"{len(story['crashed'])}",
                help="Instances that died (CUDA out-of-memory or engine crash) and finished no request afterwards.")
    c[1].metric("Failed requests", f"{p['failed']:,}",
                help="Requests an error line is about, in the server when its engine died, or that the "
                     "benchmark client saw fail (requests.status = 'failed').")
    c[2].metric("Aborted requests", f"{p['aborted']:,}", help="Client aborts and cancellations, apart from failures.")
    c[3].metric("SLO breach (min)", f"{imp['slo_breach_minutes']:g}",
                help="Total length of the p99 latency-SLO signal episodes, summed over instances.")
    c[4].metric("Peak queue", "n/a" if p["peak_waiting"] is None else f"{p['peak_waiting']:g}",
                help="Highest queue depth in the range (logged or reconstructed); n/a: the logs give none.")
    c[5].metric("Worst p99 e2e", "n/a" if p["worst_p99_e2e_s"] is None else f"{p['worst_p99_e2e_s']:.2f} s",
                help="Highest per-window p99 end-to-end latency in the range (a benchmark client's exact "
                     "figures where its results file names the request, else the log's).")
    st.caption("Hover a signal's (?) for what to do about it; the evidence is below the verdicts.")


def verdict_section(cfg: data.Settings, f: data.Filters, results, th: dict) -> None:
    st.header("Scaling verdict")
    if not results:
        st.info("No instance matches the filters.")
        return
    per_row = min(3, len(results))
    for start in range(0, len(results), per_row):
        cols = st.columns(per_row)
        for col, (engine, instance, verdict, mine) in zip(cols, results[start:start + per_row]):
            with col.container(border=True, key=f"verdict-{engine}-{instance}"):
                st.markdown(f"#### {md_text(instance)} {vd.VERDICT_BADGE[verdict]}")
                if verdict == vd.NO_DATA:
                    st.caption(f"engine {engine} · no events in the selected range: its log is silent "
                               "(stopped, crashed earlier or not shipping logs), which is not health")
                    continue
                st.caption(f"engine {engine} · {mine.height} signal(s) in the range")
                if mine.is_empty():
                    st.markdown("No signal fired in the selected range.")
                for r in mine.sort("window_start").iter_rows(named=True):
                    st.markdown(_signal_line(r, th), help=md_text(r["recommendation"]))  # names siblings: log text


def headline(cfg: data.Settings, f: data.Filters) -> None:
    p = data.peaks(cfg, f)
    c = st.columns(4)
    c[0].metric("Peak KV-cache usage", "n/a" if p["peak_kv_usage"] is None else f"{p['peak_kv_usage']:.1%}")
    c[1].metric("Finished requests", f"{p['finished']:,}")
    c[2].metric("Errors", f"{int(p['n_errors']):,}")
    c[3].metric("Instances", f"{len(f.targets)}")


def queue_section(cfg, f, avail, th) -> None:
    st.subheader("Queue depth")
    df = data.queue_depth(cfg, f)
    evidence("Queue depth", "waiting", df, "waiting", f, avail, charts.queue_chart, th.get("queue_waiting"), _dom(f))
    if not df.is_empty():
        sources = df.group_by("instance").agg(pl.col("source").unique().sort().str.join("+")).sort("instance")
        st.caption("queue_depth.source: " + "; ".join(
            f"{md_text(i)}: {QUEUE_SOURCE.get(s, s)}" for i, s in sources.rows()))


def batch_section(cfg, f, avail, th) -> None:
    st.subheader("Batch fill")
    df = data.batch_fill(cfg, f)
    drawn = evidence("Batch fill", "fill", df, "fill", f, avail, charts.fill_chart, th.get("scheduler_fill"), _dom(f))
    if not drawn:
        # without a sequence limit the fill cannot be computed, but the batch size can be shown
        evidence("Running requests", "running", df, "running", f, avail, charts.running_chart, _dom(f))


def kv_section(cfg, f, avail, th) -> None:
    st.subheader("KV cache and preemptions")
    df = data.kv_cache(cfg, f)
    # the devices label the chart: read only when there is one (a scan of the events' kinds)
    devices = data.kv_devices(cfg, f) if _have(df, "kv_usage") else []
    evidence("KV-cache usage", "kv_usage", df, "kv_usage", f, avail, charts.kv_chart, th.get("kv_usage"), _dom(f),
             devices)
    drawn = evidence("Preemptions", "preemptions", df, "preemptions", f, avail, charts.preemption_chart, _dom(f))
    if drawn and "vllm" in {e for e, _ in f.targets}:
        st.caption("Preemptions: logged counts plus preemption warning lines. vLLM V0 logs a warning for "
                   "every 50th preemption only, so one warning stands for up to 50 preemptions.")


def latency_section(cfg, f, avail, th) -> None:
    st.subheader("Latency percentiles")
    df = data.latency(cfg, f)
    # only the open tab's chart is built and sent (opening another reruns the page, from the
    # cached results); the closed tabs keep their notes on what the logs do not give
    tabs = st.tabs(["End-to-end", "Time to first token", "Time per output token", "Queue time"], key="latency_tab",
                   on_change="rerun")
    slos = {"e2e": th.get("slo_p99_e2e_s"), "ttft": th.get("slo_p99_ttft_s")}
    for tab, metric in zip(tabs, ("e2e", "ttft", "tpot", "queue")):
        with tab:
            col = f"p99_{metric}_s"
            drawn = evidence(METRIC_LABEL[f"{metric}_s"], f"{metric}_s", df, col, f, avail,
                             charts.latency_chart if tab.open is not False else None, metric, slos.get(metric), _dom(f))
            if drawn and metric == "e2e" and df["e2e_estimated"].any():
                st.caption("Some end-to-end latencies are estimated from 1 s log timestamps (arrival and finish lines).")
    if f.window_bucket_s() > f.window_s:
        st.caption(f"{f.window_bucket_s() / f.window_s:g} windows of {f.window_s:g} s per point (a long range): each "
                   "point is the highest percentile among its windows, so a breach in one window shows.")


def throughput_section(cfg, f, avail, th) -> None:
    st.subheader("Throughput")
    df = data.throughput(cfg, f)
    # each chart draws one rate per instance: its frame keeps only that (the view's other rates
    # and counts would travel to the browser for nothing)
    keys = ("ts", "engine", "instance")
    tok = df.select(*keys, pl.coalesce("gen_tps_logged", "output_tokens_per_s").alias("tokens_per_s"))
    left, right = st.columns(2)
    with left:
        have = _have(df, "requests_per_s")
        if have:
            draw(charts.line_chart, df.select(*keys, "requests_per_s"), "requests_per_s", "finished requests/s",
                 domain=_dom(f))
        missing = [f"- **{i}** ({e}): no finished requests in its log (no per-request lines)"
                   for e, i in f.targets if (e, i) not in have and e != "unknown"]
        if missing:
            head = "**Requests/s: not in the logs**" if not have else "**Requests/s: not available for every instance**"
            st.info("\n".join([head, *missing]), icon=":material/info:")
    with right:
        drawn = evidence("Tokens/s", "gen_tps", tok, "tokens_per_s", f, avail,
                         charts.line_chart, "tokens_per_s", "generated tokens/s", domain=_dom(f))
        if drawn:
            st.caption("Tokens/s: the engine's logged generation throughput where it logs one, else output "
                       "tokens of the requests finished in the window.")
    if f.window_bucket_s() > f.window_s:
        st.caption(f"{f.window_bucket_s() / f.window_s:g} windows of {f.window_s:g} s per point (a long range): "
                   "each point is the mean rate over its windows.")


def errors_section(cfg, f, th) -> None:
    st.subheader("Errors")
    df = data.errors(cfg, f)
    if df.is_empty():
        st.success("No errors logged in the selected range.")
        return
    draw(charts.errors_chart, df, th.get("errors_count"), _dom(f))
    first = (df.sort("first_ts").group_by("instance", "kind", maintain_order=True)
             .agg(pl.col("n_errors").sum(), pl.col("first_ts").first(), pl.col("first_message").first(),
                  pl.col("first_source").first(), pl.col("first_line").first()))
    table(no_none(first), "errors_table")


def slowest_section(cfg, f) -> None:
    st.subheader("Slowest requests")
    df = data.slowest_requests(cfg, f)
    if df.is_empty():
        st.info("No request with an end-to-end latency in the selected range (the logs of these "
                "instances carry no per-request timing, see the latency section).", icon=":material/info:")
        return
    shown = no_none(df)
    seconds = {c: st.column_config.NumberColumn(c, format="%.3f s") for c in ("e2e_s", "queue_s", "ttft_s", "tpot_s")
               if shown.schema[c].is_numeric()}
    table(shown, "slowest_table", column_config=seconds)


def body(cfg: data.Settings, spec: sidebar.Spec) -> None:
    cat = data.catalog(cfg)  # read again on each live refresh: new instances, newer events
    f = sidebar.resolve(spec, cat)
    if f is None:
        st.info(f"The store `{cfg.store}` has no events yet. Ingest logs first: "
                f"`servelens ingest PATH --store {cfg.store}`.")
        return
    mode = (f"Live: {sidebar_label(spec)} up to the newest event ({_t(f.end, True)}), refreshing every "
            f"{spec.refresh_s} s" if spec.live else "Post-mortem: fixed range")
    st.caption(f"{mode} · {_t(f.start, True)} → {_t(f.end, True)} · {len(f.targets)} instance(s) · "
               f"window {f.window_s:g} s")
    if not f.targets:
        st.warning("No instance matches the engine / instance / model filters.")
        return
    th = data.thresholds(cfg.thresholds)
    episodes = data.signals(cfg, f)
    results = vd.verdicts(episodes, list(f.targets), _with_data(cfg, f))
    fleet_section(cfg, f, results, episodes)
    verdict_section(cfg, f, results, th)
    headline(cfg, f)
    st.header("Evidence")
    avail = data.availability(cfg)
    queue_section(cfg, f, avail, th)
    batch_section(cfg, f, avail, th)
    kv_section(cfg, f, avail, th)
    latency_section(cfg, f, avail, th)
    throughput_section(cfg, f, avail, th)
    errors_section(cfg, f, th)
    slowest_section(cfg, f)
    data.page_drawn()


def sidebar_label(spec: sidebar.Spec) -> str:
    return next((k for k, v in sidebar.LIVE_SPANS.items() if v == spec.live_span_s), f"{spec.live_span_s} s")


cfg, _, spec = sidebar.page_setup()
st.title("servelens")
if spec.live:
    st.fragment(run_every=spec.refresh_s)(body)(cfg, spec)
else:
    body(cfg, spec)
