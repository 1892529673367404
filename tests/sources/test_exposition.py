"""The exposition parser against text written from the format (Prometheus text 0.0.4,
OpenMetrics 1.0, `promtool tsdb dump`), with the values each line says."""

from __future__ import annotations

import datetime as dt
import json

import polars as pl

from servelens.pipeline.sources import exposition as ex

UTC = dt.timezone.utc

PROM_TEXT = """\
# scrape at 1796456500.5
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="tiny-llama"} 7.0
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="tiny-llama"} 12.0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="tiny-llama"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="tiny-llama"} 5.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="tiny-llama"} 5.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="tiny-llama"} 1.25
odd_metric{path="/a \\"b\\", c}"} 3 1796456501000
# scrape at 2026-12-05T07:41:42Z
vllm:num_requests_waiting{engine="0",model_name="tiny-llama"} 9
this is not a sample line at all
"""


def _parse(text: str, default=None):
    stats = ex.ParseStats()
    raw, last = ex.parse_text(text, default, stats)
    return ex.finish_raw(raw, stats, instance="i", source="s"), stats, last


def test_prometheus_text_values_types_and_times():
    df, stats, last = _parse(PROM_TEXT)
    assert stats.bad == 1 and stats.bad_examples == ["this is not a sample line at all"]
    waiting = df.filter(pl.col("name") == "vllm:num_requests_waiting").sort("ts")
    assert waiting["value"].to_list() == [7.0, 9.0]
    assert waiting["ts"].to_list() == [dt.datetime(2026, 12, 5, 7, 41, 40, 500000, tzinfo=UTC),
                                       dt.datetime(2026, 12, 5, 7, 41, 42, tzinfo=UTC)]
    assert set(waiting["meaning"]) == {"waiting"} and set(waiting["type"]) == {"gauge"}
    assert json.loads(waiting["labels"][0]) == {"engine": "0", "model_name": "tiny-llama"}
    pre = df.filter(pl.col("name") == "vllm:num_preemptions_total")
    assert pre["family"][0] == "vllm:num_preemptions"
    assert pre["type"][0] == "counter" and pre["meaning"][0] == "preemptions" and pre["value"][0] == 12.0
    buckets = df.filter(pl.col("name") == "vllm:time_to_first_token_seconds_bucket").sort("le")
    assert buckets["le"].to_list() == [0.001, float("inf")]
    assert set(buckets["family"]) == {"vllm:time_to_first_token_seconds"} and set(buckets["meaning"]) == {"ttft"}
    assert df.filter(pl.col("name").str.ends_with("_sum"))["type"][0] == "histogram"
    # a sample's own timestamp (ms) wins over the scrape marker; quotes and braces in a value
    odd = df.filter(pl.col("name") == "odd_metric").row(0, named=True)
    assert odd["ts"] == dt.datetime(2026, 12, 5, 7, 41, 41, tzinfo=UTC)
    assert json.loads(odd["labels"]) == {"path": '/a "b", c}'}
    assert odd["meaning"] is None and odd["engine"] == "unknown" and odd["type"] == "untyped"
    assert last == dt.datetime(2026, 12, 5, 7, 41, 42, tzinfo=UTC)


def test_promtool_dump_and_openmetrics_timestamps():
    # `promtool tsdb dump`: labels with __name__, target labels, value, ms
    dump = ('{__name__="llamacpp:requests_deferred", instance="127.0.0.1:8080", job="llama"} 18 1796456500000\n'
            '{__name__="tgi_request_duration_bucket", instance="h:3000", job="tgi", le="0.5"} 4 1796456500000\n')
    df, stats, _ = _parse(dump)
    assert stats.bad == 0
    row = df.filter(pl.col("name") == "llamacpp:requests_deferred").row(0, named=True)
    assert row["target"] == "127.0.0.1:8080" and row["labels"] == "{}" and row["meaning"] == "waiting"
    assert row["ts"] == dt.datetime.fromtimestamp(1796456500, UTC)
    tgi = df.filter(pl.col("name") == "tgi_request_duration_bucket").row(0, named=True)
    assert (tgi["family"], tgi["type"], tgi["meaning"], tgi["le"]) == ("tgi_request_duration", "histogram", "e2e", 0.5)
    # OpenMetrics: seconds, exemplars, # EOF
    om = ('# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{model_name="m"} 3 1796456500.25\n'
          '# TYPE foo counter\nfoo_total 1.0 1796456500.25 # {trace_id="x"} 1 1796456500.2\n# EOF\n')
    df, stats, _ = _parse(om)
    assert stats.bad == 0
    q = df.filter(pl.col("name") == "sglang:num_queue_reqs").row(0, named=True)
    assert q["value"] == 3.0 and q["meaning"] == "waiting"
    assert q["ts"] == dt.datetime(2026, 12, 5, 7, 41, 40, 250000, tzinfo=UTC)
    foo = df.filter(pl.col("name") == "foo_total").row(0, named=True)
    assert (foo["family"], foo["type"], foo["value"]) == ("foo", "counter", 1.0)


def test_no_time_takes_the_default():
    when = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    df, stats, _ = _parse("up 1\n", when)
    assert df["ts"].to_list() == [when] and stats.timeless == 0


def test_detection_tells_exposition_from_logs():
    assert ex.looks_like_exposition(PROM_TEXT)
    assert ex.looks_like_exposition('{__name__="up", instance="a:1", job="j"} 1 1796456500000\n')
    log = ("INFO 12-05 07:41:43 [loggers.py:335] Engine 000: Avg prompt throughput: 102.0 tokens/s\n"
           "hello world\nslot launch_slot_: id  0 | task 12 | processing task\n")
    assert not ex.looks_like_exposition(log)
