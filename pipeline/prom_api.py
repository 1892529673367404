"""A Prometheus server's samples into the store (`servelens ingest --prometheus URL`).

Over `--since` .. `--until` (a post-mortem taking last night's metrics from the team's
Prometheus), in chunks of time, each one commit:

- by default the raw samples, exactly as Prometheus stored them at its scrape times: an
  instant query of a range selector (`SELECTOR[<chunk>s]` at the chunk's end, over
  `/api/v1/query`) returns every sample of the range with its own timestamp, so what comes in
  is what a live `servelens scrape` of the same server, or the same scrapes ingested from a
  file, stores: the same sample keys, deduplicated against each other by the store;
- with `--step S`, the series evaluated every S over `/api/v1/query_range` (PromQL's
  lookback fills each step with the latest sample before it): for a server whose raw
  samples are too many, at the price of samples that are not the scrapes.

Each answer is written back as exposition text (`name{labels} value ts_ms`, label values
escaped as the format escapes them) and read by the parser files of scrapes go through
(pipeline/sources/exposition.py), so labels, the `instance` label as the target, types and
meanings come out the same whatever the source. Types come from Prometheus' metadata
(`/api/v1/metadata`, kept from its scrapes; a backfilled TSDB has none, and the mapping and
the names say the type instead).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Callable

import polars as pl

from .sample_ingest import SampleResult, known_instances, store_samples
from .sources.exposition import ParseStats, finish_raw, parse_text

# without --match: every engine's metrics (the prefixes of sources/samples.py ENGINE_PREFIXES)
DEFAULT_MATCH = '{__name__=~"vllm:.+|sglang:.+|llamacpp:.+|tgi_.+|trtllm_.+|trtllm:.+|nv_trt_llm_.+"}'
CHUNK_S = 3600.0
TIMEOUT_S = 120.0
FALLBACK_INSTANCE = "prometheus"


class PromError(Exception):
    """A problem the user can fix (Prometheus unreachable, a bad selector); one line."""


def _base(url: str) -> str:
    u = url.strip()
    if "://" not in u:
        u = "http://" + u
    parts = urllib.parse.urlsplit(u)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PromError(f"--prometheus {url!r}: give the server's URL, such as http://prometheus:9090")
    path = parts.path.rstrip("/")
    for tail in ("/api/v1/query_range", "/api/v1/query", "/api/v1", "/graph"):
        if path.endswith(tail):
            path = path[: -len(tail)]
            break
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def api(base: str, endpoint: str, params: dict | list | None = None) -> object:
    """One API call: a query POSTed (form-encoded, so long selectors fit), the rest a GET;
    its `data`, or PromError with what Prometheus said."""
    headers = {"User-Agent": "servelens-ingest"}
    if params is None:
        req = urllib.request.Request(f"{base}/api/v1/{endpoint}", headers=headers)
    else:
        body = urllib.parse.urlencode(params, doseq=True).encode()
        req = urllib.request.Request(f"{base}/api/v1/{endpoint}", data=body,
                                     headers=headers | {"Content-Type": "application/x-www-form-urlencoded"})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as r:
            data = json.load(r)
    except urllib.error.HTTPError as e:
        try:
            said = json.load(e).get("error") or e.reason
        except (ValueError, AttributeError, OSError):
            said = e.reason
        raise PromError(f"Prometheus at {base} refused {endpoint} (HTTP {e.code}): {' '.join(str(said).split())}") from None
    except urllib.error.URLError as e:
        reason = e.reason
        why = ("connection refused (is it running, on that port?)" if isinstance(reason, ConnectionRefusedError)
               else getattr(reason, "strerror", None) or str(reason))
        raise PromError(f"cannot reach Prometheus at {base}: {why}") from None
    except (OSError, ValueError) as e:
        raise PromError(f"cannot read Prometheus' answer from {base}/api/v1/{endpoint}: "
                        f"{' '.join(str(e).split()) or type(e).__name__}") from None
    if not isinstance(data, dict) or data.get("status") != "success":
        said = data.get("error") if isinstance(data, dict) else None
        raise PromError(f"{base}/api/v1/{endpoint} did not answer as a Prometheus server does"
                        + (f": {said}" if said else f"; is {base} a Prometheus server?"))
    return data.get("data")


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _series_text(metric: dict) -> str:
    name = metric.get("__name__", "")
    labels = ",".join(f'{k}="{_escape(str(v))}"' for k, v in sorted(metric.items()) if k != "__name__")
    return f"{name}{{{labels}}}"


def result_text(result: list[dict]) -> str:
    """A matrix answer as exposition text, one line per sample with its time in ms."""
    prefixes, values, times = [], [], []
    for series in result:
        pts = series.get("values") or ([series["value"]] if series.get("value") else [])
        if not pts or not series.get("metric", {}).get("__name__"):
            continue
        prefixes.append(_series_text(series["metric"]))
        times.append([p[0] for p in pts])
        values.append([p[1] for p in pts])
    if not prefixes:
        return ""
    df = pl.DataFrame({"p": prefixes, "t": times, "v": values},
                      schema={"p": pl.Utf8, "t": pl.List(pl.Float64), "v": pl.List(pl.Utf8)}).explode("t", "v")
    # Prometheus keeps milliseconds: its float seconds rounded back to them
    lines = df.select(pl.format("{} {} {}", "p", "v", (pl.col("t") * 1000).round(0).cast(pl.Int64)).alias("l"))
    return "\n".join(lines["l"].to_list()) + "\n"


def metadata(base: str) -> dict[str, str]:
    """family -> type as Prometheus learnt it from its scrapes (empty when it keeps none)."""
    try:
        data = api(base, "metadata")
    except PromError:
        return {}
    out = {}
    for name, entries in (data or {}).items() if isinstance(data, dict) else ():
        if entries and isinstance(entries, list) and entries[0].get("type"):
            out[name] = str(entries[0]["type"]).lower()
    return out


def _utc(t: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc)


def _fmt(t: float) -> str:
    return f"{t:.3f}"


def chunks(since: dt.datetime, until: dt.datetime, chunk_s: float) -> list[tuple[float, float]]:
    lo, hi = since.timestamp(), until.timestamp()
    out = []
    while lo < hi:
        out.append((lo, min(hi, lo + chunk_s)))
        lo += chunk_s
    return out


def fetch_chunk(base: str, match: str, lo: float, hi: float, step_s: float | None) -> list[dict]:
    if step_s is None:
        # the range selector reaches back from `time` over [hi - range, hi]: its first
        # millisecond is the previous chunk's last, left out again below
        rng = max(1, math.ceil((hi - lo) * 1000))
        data = api(base, "query", {"query": f"{match}[{rng}ms]", "time": _fmt(hi)})
    else:
        data = api(base, "query_range", {"query": match, "start": _fmt(lo), "end": _fmt(hi), "step": f"{step_s:g}"})
    if not isinstance(data, dict) or not isinstance(data.get("result"), list):
        raise PromError(f"Prometheus at {base} answered {match!r} with no series data")
    if data.get("resultType") not in ("matrix", "vector"):
        raise PromError(f"{match!r} is not a series selector (Prometheus answered a {data.get('resultType')}); "
                        "give --match a selector such as '{job=\"vllm\"}' or 'vllm:num_requests_waiting'")
    return data["result"]


def ingest_prometheus(
    store_dir: Path | str,
    url: str,
    since: dt.datetime,
    until: dt.datetime,
    *,
    matches: list[str] | None = None,
    step_s: float | None = None,
    instance: str | None = None,
    chunk_s: float = CHUNK_S,
    say: Callable[[str], None] | None = None,
) -> SampleResult:
    """The samples of `matches` (default: every engine's metrics) over [since, until) into
    the store, one commit per chunk of time and selector. Re-running adds nothing new."""
    from .store.commit import Store

    if not since < until:
        raise PromError(f"--since ({since.isoformat()}) must be before --until ({until.isoformat()})")
    if step_s is not None and not step_s > 0:
        raise PromError("--step must be more than 0 seconds")
    base = _base(url)
    say = say or (lambda msg: None)
    matches = matches or [DEFAULT_MATCH]
    api(base, "status/buildinfo")  # a Prometheus server answers here; say so before opening the store
    types = metadata(base)
    result = SampleResult(source=base)
    series_seen: set = set()
    scrapes_seen: set = set()
    if step_s is not None:  # whole steps per chunk, so the steps run on evenly across chunks
        chunk_s = step_s * max(1, math.floor(chunk_s / step_s))
    with Store.open(store_dir, purpose="ingest --prometheus") as store:
        known = known_instances(store)
        for lo, hi in chunks(since, until, chunk_s):
            for match in matches:
                text = result_text(fetch_chunk(base, match, lo, hi, step_s))
                if not text:
                    continue
                stats = ParseStats(types=dict(types))
                raw, _ = parse_text(text, None, stats)
                # [lo, hi): a chunk's end is the next one's start, and --until is exclusive
                raw = raw.filter(pl.col("ts").is_between(_utc(lo), _utc(hi), closed="left"))
                if raw.height == 0:
                    continue
                samples = finish_raw(raw, stats, instance=None, source=base)
                series_seen |= set(samples.select("name", "labels", "le", "quantile", "target").unique().iter_rows())
                scrapes_seen |= set(samples["ts"].unique().to_list())
                store_samples(store, samples, result, explicit=instance, fallback=FALLBACK_INSTANCE, known=known)
                # later chunks keep the names the first gave
                for t, inst in samples.select("target", "instance").unique().iter_rows():
                    if t is not None:
                        known.targets.setdefault(t, inst)
    result.series = len(series_seen)
    result.scrapes = len(scrapes_seen)
    if result.samples == 0:
        result.notes.append(f"{base} holds no samples of {', '.join(matches)} between "
                            f"{since.isoformat()} and {until.isoformat()}")
    return result
