"""Chart builders: pure functions from a result frame to an Altair chart.

No querying and no Streamlit here. Rows whose value is null are dropped, never drawn as 0:
a gap in the chart means the log said nothing. Thresholds from sql/thresholds.toml are drawn
as dashed red rules with a label, so the reader sees how close the metric came to firing a
signal.
"""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence

import altair as alt
import polars as pl

UTC = dt.timezone.utc
THRESHOLD_COLOR = "#d62728"
ISO = "%Y-%m-%dT%H:%M:%SZ"
HEIGHT = 250
SOURCE_DASH = {"logged": [1, 0], "derived": [6, 3], "reconstructed": [2, 2]}
# percentiles told apart by colour AND dash (a reader who cannot tell the colours apart, or a
# black-and-white print, still can)
PERCENTILE_COLOR = {"p50": "#1f77b4", "p95": "#ff7f0e", "p99": "#9467bd"}
PERCENTILE_DASH = {"p50": [1, 0], "p95": [8, 4], "p99": [2, 2]}


def _legend(title: str) -> alt.Legend:
    """Legends never truncated (Vega's default label limit cut "reconstructed" and
    "vllm-b · model" at 1400 px), with symbols thick enough to show their dash. On the right:
    Streamlit fits the whole chart into its height, so a legend below would squash the plot."""
    return alt.Legend(title=title, labelLimit=0, titleLimit=0, symbolStrokeWidth=2, symbolSize=120)


def _dash_legend(title: str, coloured: bool = False) -> alt.Legend:
    """A dash legend draws line strokes (the default point symbol would hide the dash), grey
    unless the same field also sets the colour."""
    extra = {} if coloured else {"symbolStrokeColor": "#555", "symbolFillColor": "#555"}
    return alt.Legend(title=title, labelLimit=0, titleLimit=0, symbolType="stroke", symbolStrokeWidth=2,
                      symbolSize=300, symbolOpacity=1, **extra)


def _y_axis(percent: bool = False, integer: bool = False) -> alt.Axis:
    if percent:
        return alt.Axis(format="%", titleLimit=0)
    if integer:
        # counts: whole ticks only (no 0.5 preemptions)
        return alt.Axis(format="d", tickMinStep=1, titleLimit=0)
    return alt.Axis(titleLimit=0)


def _prepare(df: pl.DataFrame, y: str | Sequence[str]) -> pl.DataFrame:
    cols = [y] if isinstance(y, str) else list(y)
    out = df.drop_nulls(cols)
    # Vega-Lite reads ISO strings; UTC stated explicitly so that browsers do not shift times
    return out.with_columns(pl.col("ts").dt.convert_time_zone("UTC").dt.strftime(ISO))


# --- specs, built once per chart content -------------------------------------------------
#
# Building an Altair chart and converting it to Vega-Lite (what st.altair_chart does) costs
# 50-60 ms a chart, about 0.5 CPU-s of every rerun of the Overview page. The same filters give
# the same frames (the queries are cached), so the spec of a chart is kept, keyed by its
# builder, the builder's arguments and the content of its frame: going back to filters seen
# before, a live refresh with no new data and every other visitor of the same range build no
# chart. The frame travels as a named dataset that Streamlit sends as Arrow, as with
# st.altair_chart.
SPECS_KEPT = 256
_specs: OrderedDict[tuple, dict] = OrderedDict()
_specs_lock = threading.Lock()


def frame_key(df: pl.DataFrame) -> tuple:
    """The frame's shape, schema and a digest of every row's hash (same content, same key)."""
    digest = hashlib.blake2b(df.hash_rows(seed=0).to_numpy().tobytes(), digest_size=16)
    return df.height, tuple((c, str(t)) for c, t in df.schema.items()), digest.hexdigest()


def _to_spec(chart: alt.Chart | alt.LayerChart) -> dict:
    """The chart's Vega-Lite spec with its frames as named datasets (what st.altair_chart
    sends: Streamlit's theme, not Altair's default one)."""
    datasets: dict[str, object] = {}

    def named(data: object) -> dict[str, str]:
        name = f"data-{len(datasets)}"
        for k, v in datasets.items():  # the same frame in two layers: one dataset
            if v is data:
                return {"name": k}
        datasets[name] = data
        return {"name": name}

    alt.data_transformers.register("servelens_named", named)
    theme = alt.theme.enable("none") if alt.theme.active == "default" else None
    try:
        with alt.data_transformers.enable("servelens_named"):
            spec = chart.to_dict()
    finally:
        if theme is not None:
            alt.theme.enable("default")
    spec["datasets"] = {**spec.get("datasets", {}), **datasets}
    return spec


def vega_spec(build: Callable[..., alt.Chart | alt.LayerChart], df: pl.DataFrame, *args, **kwargs) -> dict:
    """`build(df, *args, **kwargs)` as a Vega-Lite spec for st.vega_lite_chart, from the kept
    specs when the same builder drew the same frame with the same arguments before (the least
    recently used of SPECS_KEPT dropped first). A fresh copy each call: Streamlit takes the
    datasets out of the spec it is given."""
    key = (build.__module__, build.__qualname__, frame_key(df), repr(args), repr(sorted(kwargs.items())))
    with _specs_lock:
        spec = _specs.get(key)
        if spec is not None:
            _specs.move_to_end(key)
    if spec is None:
        with _specs_lock:  # Altair's data transformer and theme are process-wide settings
            spec = _to_spec(build(df, *args, **kwargs))
            _specs[key] = spec
            while len(_specs) > SPECS_KEPT:
                _specs.popitem(last=False)
    out = copy.deepcopy({k: v for k, v in spec.items() if k != "datasets"})
    out["datasets"] = dict(spec["datasets"])
    return out


# `domain`: the x range of a chart, [start, end] of the selected time range (`time_domain`),
# so that the charts line up under each other and a gap shows that the log said nothing then.
def time_domain(start: dt.datetime, end: dt.datetime) -> list[str]:
    return [start.astimezone(UTC).strftime(ISO), end.astimezone(UTC).strftime(ISO)]


def _time_format(domain: list[str] | None) -> str:
    """Tick labels precise enough for the span (a short incident gets seconds)."""
    if not domain:
        return "%H:%M"
    a, b = (dt.datetime.strptime(d, ISO) for d in domain)
    span = (b - a).total_seconds()
    return "%H:%M:%S" if span <= 1200 else "%H:%M" if span <= 2 * 86400 else "%m-%d %H:%M"


def _x(domain: list[str] | None = None) -> alt.X:
    scale = alt.Scale(type="utc", domain=domain) if domain else alt.Scale(type="utc")
    return alt.X("ts:T", title="time (UTC)", scale=scale,
                 axis=alt.Axis(format=_time_format(domain), labelOverlap=True))


def threshold_rule(value: float | None, label: str) -> alt.LayerChart | None:
    """A dashed horizontal rule at `value` with its label at the left end."""
    if value is None:
        return None
    # inline values: the rule travels in the chart spec itself, not as a separate dataset
    base = alt.Chart(alt.Data(values=[{"threshold": float(value), "label": label}]))
    rule = base.mark_rule(color=THRESHOLD_COLOR, strokeDash=[6, 4], size=1.5).encode(y=alt.Y("threshold:Q"))
    text = base.mark_text(color=THRESHOLD_COLOR, align="left", baseline="bottom", dx=4, dy=-2, fontSize=11).encode(
        y=alt.Y("threshold:Q"), text=alt.Text("label:N"), x=alt.XValue(0)
    )
    return rule + text


# Channels are given as Altair objects (alt.Tooltip("x:N"), not "x:N"): Altair turns a bare
# shorthand or dict into its channel class by hashing every class of the Vega-Lite schema
# (a third of a chart's build time), the same spec either way.
def line_chart(
    df: pl.DataFrame,
    y: str,
    y_title: str,
    *,
    color: str = "instance",
    dash: str | None = None,
    threshold: float | None = None,
    threshold_label: str = "threshold",
    percent: bool = False,
    tooltip: Sequence[str] = (),
    domain: list[str] | None = None,
) -> alt.Chart | alt.LayerChart:
    data = _prepare(df, y)
    enc = {
        "x": _x(domain),
        "y": alt.Y(f"{y}:Q", title=y_title, axis=_y_axis(percent)),
        "color": alt.Color(f"{color}:N", legend=_legend(color)),
        "tooltip": [alt.Tooltip("ts:T", format="%Y-%m-%d %H:%M:%S", formatType="utc", title="time (UTC)"), alt.Tooltip(f"{color}:N"),
                    alt.Tooltip(f"{y}:Q", format=".1%" if percent else ",.3~f")]
        + [alt.Tooltip(t) for t in tooltip],
    }
    if dash == "source":
        # logged values solid, derived / reconstructed (estimated) ones dashed
        enc["strokeDash"] = alt.StrokeDash("source:N", legend=_dash_legend("source"), scale=alt.Scale(
            domain=list(SOURCE_DASH), range=list(SOURCE_DASH.values())))
        enc["detail"] = alt.Detail("source:N")
    elif dash == "percentile":
        enc["strokeDash"] = alt.StrokeDash("percentile:N", legend=_dash_legend("percentile", color == "percentile"), scale=alt.Scale(
            domain=list(PERCENTILE_DASH), range=list(PERCENTILE_DASH.values())))
        enc["detail"] = alt.Detail("percentile:N")
    elif dash is not None:
        enc["strokeDash"] = alt.StrokeDash(f"{dash}:N", legend=_dash_legend(dash))
        enc["detail"] = alt.Detail(f"{dash}:N")
    if color == "percentile":
        enc["color"] = alt.Color("percentile:N", legend=_dash_legend("percentile", True), scale=alt.Scale(
            domain=list(PERCENTILE_COLOR), range=list(PERCENTILE_COLOR.values())))
    chart: alt.Chart | alt.LayerChart = alt.Chart(data).mark_line(interpolate="step-after", point=len(data) < 60).encode(**enc)
    rule = threshold_rule(threshold, f"{threshold_label} {threshold:.0%}" if percent and threshold is not None else
                          f"{threshold_label} {threshold:g}" if threshold is not None else "")
    if rule is not None:
        chart = chart + rule
    return chart.properties(height=HEIGHT)


def queue_chart(df: pl.DataFrame, threshold: float | None, domain: list[str] | None = None) -> alt.Chart | alt.LayerChart:
    """Waiting requests per instance; dashed lines are reconstructed (estimated) series."""
    return line_chart(df, "waiting", "waiting requests", dash="source",
                      threshold=threshold, threshold_label="scale-out threshold", tooltip=["waiting_max:Q", "source:N"],
                      domain=domain)


def fill_chart(df: pl.DataFrame, threshold: float | None, domain: list[str] | None = None) -> alt.Chart | alt.LayerChart:
    return line_chart(df, "fill", "batch fill (running / max)", percent=True, dash="source",
                      threshold=threshold, threshold_label="scheduler-limit threshold", tooltip=["running:Q", "max_num_seqs:Q"],
                      domain=domain)


def running_chart(df: pl.DataFrame, domain: list[str] | None = None) -> alt.Chart | alt.LayerChart:
    return line_chart(df, "running", "running requests", dash="source", tooltip=["running_max:Q"],
                      domain=domain)


def kv_title(devices: Sequence[str] = ()) -> str:
    """The KV chart's axis title in the log's words: `CPU KV-cache usage` for a CPU backend,
    `GPU ...` for a GPU, both named when the selection mixes them; no device when no log
    of the selection names one (TensorRT-LLM's block counts)."""
    named = sorted({d for d in devices if d})
    return f"{' / '.join(named)} KV-cache usage" if named else "KV-cache usage"


def kv_chart(df: pl.DataFrame, threshold: float | None, domain: list[str] | None = None,
             devices: Sequence[str] = ()) -> alt.Chart | alt.LayerChart:
    return line_chart(df, "kv_usage", kv_title(devices), percent=True, threshold=threshold,
                      threshold_label="KV-pressure threshold", tooltip=["kv_usage_max:Q"], domain=domain)


def bar_chart(df: pl.DataFrame, y: str, y_title: str, *, color: str = "instance", threshold: float | None = None,
              threshold_label: str = "threshold", domain: list[str] | None = None,
              integer: bool = False) -> alt.Chart | alt.LayerChart:
    """Stacked bars per time bucket; `integer` for counts (whole-number ticks)."""
    data = _prepare(df, y)
    chart: alt.Chart | alt.LayerChart = alt.Chart(data).mark_bar().encode(
        x=_x(domain),
        y=alt.Y(f"sum({y}):Q", title=y_title, stack=True, axis=_y_axis(integer=integer)),
        color=alt.Color(f"{color}:N", legend=_legend(color)),
        tooltip=[alt.Tooltip("ts:T", format="%Y-%m-%d %H:%M:%S", formatType="utc", title="time (UTC)"), alt.Tooltip("instance:N"),
                 alt.Tooltip(f"{color}:N"), alt.Tooltip(f"{y}:Q")],
    )
    rule = threshold_rule(threshold, f"{threshold_label} {threshold:g}") if threshold is not None else None
    if rule is not None:
        chart = chart + rule
    return chart.properties(height=HEIGHT)


def preemption_chart(df: pl.DataFrame, domain: list[str] | None = None) -> alt.Chart | alt.LayerChart:
    return bar_chart(df.with_columns(pl.col("preemptions").cast(pl.Float64)), "preemptions", "preemptions logged",
                     domain=domain, integer=True)


def errors_chart(df: pl.DataFrame, threshold: float | None, domain: list[str] | None = None) -> alt.Chart | alt.LayerChart:
    """Errors per window by kind. The `errors` signal fires at `threshold` errors in a window
    (warning), or at a single crash / out-of-memory (critical): the rule says both, as the
    verdict cards do."""
    chart = bar_chart(df, "n_errors", "errors per window", color="kind", domain=domain, integer=True)
    if threshold is None:
        return chart
    return chart + threshold_rule(threshold, f"errors signal: {threshold:g} per window (warning); any crash or OOM: critical")


LATENCY_PERCENTILES = ("p50", "p95", "p99")


def latency_chart(df: pl.DataFrame, metric: str, slo: float | None = None, domain: list[str] | None = None) -> alt.Chart | alt.LayerChart:
    """p50/p95/p99 of one latency metric (`e2e`, `ttft`, `tpot`, `queue`) per window. One line
    colour per percentile for a single series, else per series with dashes per percentile."""
    cols = [f"{p}_{metric}_s" for p in LATENCY_PERCENTILES]
    series = pl.when(pl.col("model").is_null()).then(pl.col("instance")).otherwise(
        pl.col("instance") + pl.lit(" · ") + pl.col("model"))
    long = (
        df.with_columns(series.alias("series"))
        .unpivot(index=["ts", "series"], on=cols, variable_name="percentile", value_name="seconds")
        .with_columns(pl.col("percentile").str.extract(r"^(p\d+)"))
    )
    n_series = long.drop_nulls("seconds")["series"].n_unique()
    if n_series <= 1:
        chart = line_chart(long, "seconds", f"{metric} latency (s)", color="percentile", dash="percentile", domain=domain)
    else:
        chart = line_chart(long, "seconds", f"{metric} latency (s)", color="series", dash="percentile", domain=domain)
    if slo is not None:
        chart = chart + threshold_rule(slo, f"p99 SLO {slo:g} s")  # type: ignore[operator]
    return chart


def warm() -> None:
    """Build and validate one small chart: Altair builds its JSON-schema validator on the
    first validation (a few hundred ms), which the first visitor would otherwise wait for
    (dashboards/serve.py calls this while the server starts)."""
    t = dt.datetime(2026, 1, 1, tzinfo=UTC)
    df = pl.DataFrame({"ts": [t, t + dt.timedelta(seconds=1)], "engine": ["vllm"] * 2, "instance": ["warm-up"] * 2,
                       "source": ["logged"] * 2, "waiting": [0.0, 1.0], "waiting_max": [0.0, 1.0]})
    queue_chart(df, 1.0, time_domain(t, t + dt.timedelta(seconds=2))).to_dict()
