"""The sidebar: mode (live / post-mortem), time range, engine / instance / model filters and
the window width, and how a choice turns into `data.Filters`.

Widgets have keys, so their values live in the session state and survive both the live
refresh (which reruns only the page's fragment) and switching pages.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass

import polars as pl
import streamlit as st
from servelens.dashboards import data
from servelens.pipeline.report.mdsafe import md_text

UTC = dt.timezone.utc
LIVE_SPANS = {"last 5 min": 300, "last 15 min": 900, "last 30 min": 1800, "last hour": 3600,
              "last 6 hours": 6 * 3600, "last 24 hours": 24 * 3600}
REFRESH = {"every 5 s": 5, "every 10 s": 10, "every 30 s": 30, "every minute": 60}
WINDOWS = {"30 s": 30.0, "1 min": 60.0, "2 min": 120.0, "5 min": 300.0, "15 min": 900.0}
DEFAULT_LIVE_SPAN = "last 15 min"
DEFAULT_REFRESH = "every 10 s"
# A store whose newest event is this recent opens in live mode.
LIVE_IF_NEWER_THAN_S = 600


@dataclass(frozen=True)
class Spec:
    """What the user chose; resolved against the store's current contents by `resolve`."""

    live: bool
    live_span_s: int
    refresh_s: int
    start: dt.datetime | None
    end: dt.datetime | None
    engines: tuple[str, ...]
    instances: tuple[str, ...]
    models: tuple[str, ...]
    window_s: float


def _naive_utc(t: dt.datetime) -> dt.datetime:
    return t.astimezone(UTC).replace(tzinfo=None)


def _floor_minute(t: dt.datetime) -> dt.datetime:
    return t.replace(second=0, microsecond=0)


def store_range(cat: pl.DataFrame) -> tuple[dt.datetime, dt.datetime] | None:
    if cat.is_empty() or cat["first_ts"].null_count() == cat.height:
        return None
    return cat["first_ts"].min().astimezone(UTC), cat["last_ts"].max().astimezone(UTC)  # type: ignore[union-attr]


def _range_bounds(rng: tuple[dt.datetime, dt.datetime]) -> tuple[dt.datetime, dt.datetime]:
    """The post-mortem range the sidebar offers (naive UTC, to the minute): the store's."""
    return _floor_minute(_naive_utc(rng[0])), _floor_minute(_naive_utc(rng[1])) + dt.timedelta(minutes=1)


def default_spec(cfg: data.Settings, cat: pl.DataFrame, now: dt.datetime | None = None) -> Spec:
    """What the sidebar shows a visitor who has chosen nothing yet: live mode when the store's
    newest event is recent, else the store's whole range; every engine, instance and model;
    the thresholds' window width. The server's warm-up (dashboards/serve.py) computes that
    page before anyone asks for it."""
    rng = store_range(cat)
    now = now or dt.datetime.now(UTC)
    live = rng is not None and (now - rng[1]).total_seconds() < LIVE_IF_NEWER_THAN_S
    start = end = None
    if not live and rng is not None:
        start, end = (t.replace(tzinfo=UTC) for t in _range_bounds(rng))
    window = float(data.thresholds(cfg.thresholds).get("window_s", 60.0))
    return Spec(live=live, live_span_s=LIVE_SPANS[DEFAULT_LIVE_SPAN] if live else 0,
                refresh_s=REFRESH[DEFAULT_REFRESH] if live else 0, start=start, end=end, engines=(), instances=(),
                models=(), window_s=window if window in WINDOWS.values() else WINDOWS["1 min"])


def render(cfg: data.Settings, cat: pl.DataFrame) -> Spec:
    sb = st.sidebar
    rng = store_range(cat)
    default = default_spec(cfg, cat)
    sb.header("Filters")
    live = sb.toggle("Live mode", value=default.live, key="live",
                     help="Refresh the page by itself while the store is being ingested into. "
                          "Off: post-mortem mode, a fixed time range of a past incident.")
    live_span = refresh_s = 0
    start = end = None
    if live:
        span_label = sb.selectbox("Time range", list(LIVE_SPANS), index=list(LIVE_SPANS).index(DEFAULT_LIVE_SPAN),
                                  key="live_span", help="Relative to the newest event in the store.")
        live_span = LIVE_SPANS[span_label]
        refresh_s = REFRESH[sb.selectbox("Refresh", list(REFRESH), index=list(REFRESH).index(DEFAULT_REFRESH),
                                         key="refresh")]
    elif rng is not None:
        lo, hi = _range_bounds(rng)
        start = sb.datetime_input("From (UTC)", value=lo, min_value=lo, max_value=hi, key="start",
                                  format="YYYY-MM-DD", step=dt.timedelta(minutes=1))
        end = sb.datetime_input("To (UTC)", value=hi, min_value=lo, max_value=hi, key="end",
                                format="YYYY-MM-DD", step=dt.timedelta(minutes=1))
        start = (start or lo).replace(tzinfo=UTC)
        end = (end or hi).replace(tzinfo=UTC)
    engines_all = sorted(cat["engine"].drop_nulls().unique().to_list()) if not cat.is_empty() else []
    engines = sb.multiselect("Engine", engines_all, key="engines", placeholder="all engines")
    inst_df = cat.filter(pl.col("engine").is_in(engines)) if engines else cat
    instances_all = sorted(inst_df["instance"].drop_nulls().unique().to_list()) if not cat.is_empty() else []
    instances = sb.multiselect("Instance", instances_all, key="instances", placeholder="all instances")
    models_all = sorted(inst_df["model"].drop_nulls().unique().to_list()) if not cat.is_empty() else []
    models = sb.multiselect("Model", models_all, key="models", placeholder="all models",
                            help="Latency and request tables keep only this model's requests; the "
                                 "instance-level charts keep the instances that served it.")
    labels = list(WINDOWS)
    default_label = next(k for k, v in WINDOWS.items() if v == default.window_s)
    window_label = sb.select_slider("Window", labels, value=default_label, key="window",
                                    help="Width of the windows of the percentiles, throughput, errors and signals.")
    sb.divider()
    sb.caption(f"Store: `{cfg.store}`")
    if cfg.thresholds:
        sb.caption(f"Thresholds: `{cfg.thresholds}`")
    return Spec(
        live=live,
        live_span_s=live_span,
        refresh_s=refresh_s,
        start=start,
        end=end,
        engines=tuple(engines),
        instances=tuple(instances),
        models=tuple(models),
        window_s=WINDOWS[window_label],
    )


def page_setup() -> tuple[data.Settings, pl.DataFrame, Spec]:
    """Every page starts here: the settings, the store's catalog (or one error line and
    stop), and the sidebar."""
    from servelens.pipeline.store.manifest import StoreError

    cfg = data.settings()
    try:
        with st.spinner("Reading the store and computing the metric views…"):
            cat = data.catalog(cfg)
    except (StoreError, data.QueryError) as e:
        st.error(f"Cannot read the store: {md_text(e)}")
        st.stop()
    except (ValueError, RuntimeError) as e:  # a view file of sql/ or the thresholds file is broken
        st.error(f"Cannot load the metric views: {md_text(data.one_line(e))}")
        st.stop()
    return cfg, cat, render(cfg, cat)


def resolve(spec: Spec, cat: pl.DataFrame) -> data.Filters | None:
    """The Filters for the store as it is now (live: the span before the newest event)."""
    rng = store_range(cat)
    if rng is None:
        return None
    if spec.live or spec.start is None or spec.end is None:
        end = rng[1] + dt.timedelta(microseconds=1)
        span = spec.live_span_s or math.ceil((rng[1] - rng[0]).total_seconds()) + 1
        start = end - dt.timedelta(seconds=span)
    else:
        start, end = spec.start, spec.end
    targets = data.resolve_targets(cat, spec.engines, spec.instances, spec.models)
    every = not spec.models and targets == data.resolve_targets(cat, (), (), ())
    return data.Filters(start=start, end=end, engines=spec.engines, instances=spec.instances,
                        models=spec.models, window_s=spec.window_s, targets=targets, every=every)
