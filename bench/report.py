"""The benchmark's figures as Markdown: the machine, one table per part, and the targets
with met / missed."""

from __future__ import annotations

import math

MiB = 2**20


def _f(x: float, nd: int = 2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:,.{nd}f}"


def _mb(b: int) -> str:
    return f"{b / 1e6:,.0f} MB" if b >= 1e7 else f"{b / 1e6:,.1f} MB"


def _qt(v: dict, key: str) -> str:
    if "timeout_s" in v:
        return f"not finished in {v['timeout_s']:.0f} s"
    return f"{_f(v.get(key))} s"


def targets(res: dict) -> list[tuple[str, str, bool | None]]:
    out = []
    for row in res.get("ingest", []):
        ing, base, floor = row["ingest"]["wall_s"], row["baseline"]["wall_s"], row["floor"]
        out.append((f"{row['engine']}: ingest >= 10x faster than the Python loop",
                    f"{base / ing:.1f}x", base / ing >= 10))
        out.append((f"{row['engine']}: ingest within 10x of the read-only floor (Python buffered read)",
                    f"{ing / floor['py_s']:.0f}x the Python read ({ing / floor['wc_s']:.0f}x `wc -l`)",
                    ing / floor["py_s"] <= 10))
    mem = res.get("memory")
    small = next((r for r in res.get("ingest", []) if mem and r["engine"] == mem["engine"]), None)
    if mem and small:
        big_rss, small_rss = mem["ingest"]["peak_rss"], small["ingest"]["peak_rss"]
        out.append((f"peak memory flat: {_mb(mem['bytes'])} input <= {_mb(small['bytes'])} input (+10% noise), < 1 GiB",
                    f"{big_rss / MiB:,.0f} vs {small_rss / MiB:,.0f} MiB",
                    big_rss <= small_rss * 1.10 and big_rss < 2**30))
    q = res.get("query")
    if q:
        for name, v in q["views"].items():
            sh = v.get("shipped", {})
            t = sh.get("median_s", float("inf"))
            met = (t < 2.0) if q["requests"] >= 10_000_000 else (None if t < 2.0 else False)
            out.append((f"{name} over {q['requests']:,} requests < 2 s (as shipped)", _qt(sh, "median_s"), met))
    t = res.get("tail")
    if t and "missing" not in t:
        out.append(("tailer >= 50,000 lines/s sustained", f"{t['burst_rate']:,.0f} lines/s (burst), "
                    f"{t['steady_rate']:,.0f} at {t['rate_target']:,.0f} offered", t["burst_rate"] >= 50_000))
        out.append(("tailer freshness p99 < 2 s", f"{_f(t['fresh_p99'])} s", t["fresh_p99"] < 2.0))
    return out


def render(res: dict) -> str:
    m, a = res["machine"], res["args"]
    lines = [
        "# servelens benchmark",
        "",
        f"Run {res['started']}{' (--quick: tiny inputs, figures mean nothing)' if a['quick'] else ''}; "
        f"`bench/run.py` ({a['runs']} runs per figure, median; {a.get('memory_runs', a['runs'])} for the memory input; "
        f"total {res['total_s'] / 60:.1f} min).",
        "",
        f"Machine: {m.get('cores')} cores ({m.get('cpu')}), {m.get('mem_gb', '-')} GB RAM, {m.get('os')}; "
        f"Python {m.get('python')}, polars {m.get('polars')}, DuckDB {m.get('duckdb')}, pyarrow {m.get('pyarrow')}; "
        f"servelens {m.get('servelens')} at commit {m.get('commit')}. Load average (1/5/15 min) at start "
        f"{res.get('load_start')}, at end {res.get('load_end')}.",
        "",
        *(["**In-process timing** (`--in-process`): ingest and baseline are library calls in one process, "
            "without interpreter start-up; no peak RSS.", ""] if a.get("in_process") else []),
        *([f"Taken from an earlier run of bench/run.py (part: {', '.join(res['merged']['parts'])}; {res['merged']['started']}, "
           f"commit {res['merged']['commit']}, load {res['merged']['load_start']} -> {res['merged']['load_end']}, "
           f"{res['merged']['total_s'] / 60:.1f} min); the rest from this run.", ""] if res.get("merged") else []),
        "Inputs: simulator logs (`steady` scenario, each engine's default format variant), read from the page "
        "cache (all runs warm). Peak memory is the child process's maximum RSS (wait4).",
        "",
    ]
    if res.get("ingest"):
        lines += [
            "## Ingest",
            "",
            "| engine | input | lines | servelens ingest | MB/s | lines/s | peak RSS | Python loop (baseline) | "
            "baseline MB/s | speed-up | floor `wc -l` | floor Python read | ingest / Python read | then: rollup refresh |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in res["ingest"]:
            ing, base, fl = r["ingest"], r["baseline"], r["floor"]
            floor_s = fl["py_s"]
            lines.append(
                f"| {r['engine']} | {_mb(r['bytes'])} ({r['files']} files) | {r['lines']:,} | {_f(ing['wall_s'])} s | "
                f"{_f(r['bytes'] / 1e6 / ing['wall_s'], 1)} | {r['lines'] / ing['wall_s']:,.0f} | "
                f"{ing['peak_rss'] / MiB:,.0f} MiB | {_f(base['wall_s'])} s | {_f(r['bytes'] / 1e6 / base['wall_s'], 1)} | "
                f"**{base['wall_s'] / ing['wall_s']:.1f}x** | {_f(fl['wc_s'], 3)} s | {_f(fl['py_s'], 3)} s | "
                f"{ing['wall_s'] / floor_s:.0f}x | {_f(ing.get('rollup_s', 0.0))} s |"
            )
        lines += ["", "`servelens ingest` parses and stores, then refreshes the rollup (the stored "
                  "`window_metrics`, pipeline/rollup.py) of the instances it touched: timed apart in the "
                  "last column (`ingest --no-rollups`, then `rollup.refresh`), since the Python loop "
                  "computes no metric; a user running `servelens ingest` waits for both."]
        lines += ["", "Events stored per engine (last run): " + "; ".join(
            f"{r['engine']} {r['ingest']['events']:,} events, {r['ingest']['unparsed']:,} unparsed"
            for r in res["ingest"]) + ". Baseline peak RSS: " + ", ".join(
            f"{r['engine']} {r['baseline']['peak_rss'] / MiB:,.0f} MiB" for r in res["ingest"]) + "."]
        lines += ["", "Runs (s): " + "; ".join(
            f"{r['engine']} ingest {', '.join(_f(x) for x in r['ingest']['walls'])}, "
            f"baseline {', '.join(_f(x) for x in r['baseline']['walls'])}" for r in res["ingest"]) + ".", ""]
    mem = res.get("memory")
    if mem:
        small = next((r for r in res.get("ingest", []) if r["engine"] == mem["engine"]), None)
        lines += ["## Memory in input size", "", "| engine | input | servelens ingest | MB/s | peak RSS |", "|---|---|---|---|---|"]
        if small:
            lines.append(f"| {small['engine']} | {_mb(small['bytes'])} | {_f(small['ingest']['wall_s'])} s | "
                         f"{_f(small['bytes'] / 1e6 / small['ingest']['wall_s'], 1)} | {small['ingest']['peak_rss'] / MiB:,.0f} MiB |")
        lines.append(f"| {mem['engine']} | {_mb(mem['bytes'])} | {_f(mem['ingest']['wall_s'])} s | "
                     f"{_f(mem['bytes'] / 1e6 / mem['ingest']['wall_s'], 1)} | {mem['ingest']['peak_rss'] / MiB:,.0f} MiB |")
        lines += ["", "Peak RSS per run (MiB): " + ", ".join(f"{x / MiB:,.0f}" for x in mem["ingest"]["rss_runs"]) + ".", ""]
    gz = res.get("gzip")
    if gz:
        ing = gz["ingest"]
        lines += [
            "## Gzipped input (post-mortem: rotated logs)", "",
            f"The same {gz['engine']} input, each file gzipped (`gzip -c`, level 6): {_mb(gz['gz_bytes'])} on disk, "
            f"{_mb(gz['bytes'])} decompressed. MB/s counts decompressed bytes.", "",
            "| engine | servelens ingest | MB/s | peak RSS | same files uncompressed | floor `gzip -dc` | ingest / floor |",
            "|---|---|---|---|---|---|---|",
            f"| {gz['engine']} | {_f(ing['wall_s'])} s | {_f(gz['bytes'] / 1e6 / ing['wall_s'], 1)} | "
            f"{ing['peak_rss'] / MiB:,.0f} MiB | {_f(gz['plain_s']) + ' s' if gz.get('plain_s') else '-'} | "
            f"{_f(gz['floor_s'])} s | {ing['wall_s'] / gz['floor_s']:.1f}x |", "",
        ]
    q = res.get("query")
    if q:
        lines += [
            "## Queries",
            "",
            f"Store: {q['requests']:,} TGI requests (one `Success` line each) over {q['instances']} instances, "
            f"{q['parts']} Parquet parts: the {_mb(q['bytes'])} TGI input ingested once ({q['base_requests']:,} requests, "
            f"{_f(q['ingest_s'], 0)} s, peak {q['peak_rss'] / MiB:,.0f} MiB), then {q['copies']} copies of its events under "
            "new instance names written through the store's staging and commit (a fleet of replicas; the copies took "
            f"{_f(q['copy_s'], 0)} s where ingesting that many more gigabytes would take minutes). In-process: a fresh "
            "process, `connect(store)` + the whole view fetched as Arrow, timed per run; CLI: "
            "`servelens sql \"select * from VIEW\" -o /dev/null`, Python start-up included.",
            "",
            "`shipped` is what servelens does: `window_metrics` (and the views over it) read the store's rollup "
            "(pipeline/rollup.py, rebuilt after the copies); `raw path` computes them from the events "
            "(`--no-rollups`), as before rollups.",
            "",
            "| view | rows | shipped: first run | shipped: median | raw path: median | CLI end to end (shipped) |",
            "|---|---|---|---|---|---|",
        ]
        for name, v in q["views"].items():
            sh, off = v.get("shipped", {}), v.get("raw", v.get("asof_off", {}))
            lines.append(
                f"| {name} | {sh.get('rows', off.get('rows', 0)):,} | {_qt(sh, 'first_s')} | **{_qt(sh, 'median_s')}** | "
                f"{_qt(off, 'median_s')} | {_f(v['cli_s']) + ' s' if v.get('cli_s') else 'not finished'} |")
        lines.append("")
    t = res.get("tail")
    if t:
        lines += ["## Tailer", ""]
        if "missing" in t:
            lines += [t["missing"], ""]
        else:
            lines += [
                "`servelens tail` (default flush interval) follows a TGI log while a writer appends real lines: "
                f"{t['steady_lines']:,} lines at a fixed {t['rate_target']:,.0f} lines/s in 50 ms batches "
                + (f"(after a first phase of {t['low_lines']:,} lines at {t['low_rate']:,.0f} lines/s, a fifth of the target) "
                   if t.get("low_rate") else "")
                + "(freshness = append to committed in the store's manifest, polled every 20 ms), then a burst of "
                f"{t['burst_lines']:,} lines at once (sustained rate = lines / time until all committed).",
                "",
                "| offered rate | committed rate (steady) | freshness p50 | p99 | max | burst rate | peak RSS | events = lines |",
                "|---|---|---|---|---|---|---|---|",
                f"| {t['rate_target']:,.0f} lines/s | {t['steady_rate']:,.0f} lines/s | {_f(t['fresh_p50'])} s | "
                f"**{_f(t['fresh_p99'])} s** | {_f(t['fresh_max'])} s | **{t['burst_rate']:,.0f} lines/s** | "
                f"{t['peak_rss_bytes'] / MiB:,.0f} MiB | {t['events']:,} |",
            ]
            if t.get("low_rate"):
                lines.append(
                    f"| {t['low_rate']:,.0f} lines/s (first phase) | {t['low_committed_rate']:,.0f} lines/s | "
                    f"{_f(t['low_p50'])} s | {_f(t['low_p99'])} s | - | - | - | - |")
            lines.append("")
            if t.get("notes"):
                lines += ["Notes: " + "; ".join(t["notes"]), ""]
    tg = targets(res)
    if tg:
        lines += ["## Targets", "", "| target | measured | met |", "|---|---|---|"]
        for name, val, ok in tg:
            lines.append(f"| {name} | {val} | {'yes' if ok else ('n/a' if ok is None else '**no**')} |")
        lines.append("")
    return "\n".join(lines)
