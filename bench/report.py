"""The benchmark's figures as Markdown: the machine, one table per part, and the targets
with met / missed."""

from __future__ import annotations

import math

MiB = 2**20
# bench/run.py rewrites its output file above this line and keeps everything from it on
KEEP_MARKER = "<!-- written by hand below: bench/run.py keeps this part -->"
GB = 10**9


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


def _cli(c: dict | None) -> str:
    """A `servelens sql` figure: wall seconds (CPU seconds), or why there is none."""
    if not c:
        return "-"
    if c.get("timeout_s"):
        return f"did not finish in {c['timeout_s']:.0f} s"
    if c.get("error"):
        return f"failed: {c['error']}"
    return f"{_f(c['wall_s'])} s ({_f(c['cpu_s'])} CPU-s)"


def _ok(c: dict | None, limit: float) -> bool | None:
    if not c:
        return None
    if c.get("timeout_s") or c.get("error"):
        return False
    return c["wall_s"] < limit


def targets(res: dict) -> list[tuple[str, str, str, bool | None]]:
    """Issue 20's targets: (target, figure, same-run baseline, met); met None = not measured."""
    out: list[tuple[str, str, str, bool | None]] = []
    q = res.get("query")
    big = bool(q) and q["requests"] >= 10_000_000
    store = f"{q['requests']:,} requests" if q else "-"
    if q:
        v = q["views"].get("scaling_signals", {})
        c = v.get("cli")
        ok = _ok(c, 1.0)
        sh = v.get("shipped", {})
        inproc = f"; in process (imports done) {_qt(sh, 'median_s')}" if sh else ""
        out.append((f"`scaling_signals` < 1 s ({store}; `servelens sql`, stored rollup as shipped)", _cli(c) + inproc,
                    f"raw path (`--no-rollups`): {_cli(v.get('cli_raw'))}", ok if big or ok is False else None))
        rg = q.get("range")
        if rg:
            ok = _ok(rg["hour"], 0.5)
            out.append((f"a 1-hour `latency_percentiles` < 0.5 s (`--since {rg['since']} --until {rg['until']}`)",
                        _cli(rg["hour"]) + f", {rg['hour'].get('rows', 0):,} rows",
                        f"whole store, no range: {_cli(rg['whole'])}", ok if big or ok is False else None))
    pc = res.get("parts")
    if pc:
        ok = _ok(pc["count"], 1.0)
        out.append((f"`select count(*) from events` < 1 s at {pc['parts']:,} parts ({pc['events']:,} events)",
                    _cli(pc["count"]), f"after `servelens compact`, {pc['compacted_parts']} parts: {_cli(pc['compacted'])}",
                    ok if pc["parts"] >= 3000 or ok is False else None))
    d = res.get("dash")
    if d and "skipped" not in d:
        where = f"the query store ({store})" if q else "the query store"
        out.append((f"dashboard first paint < 3 s ({where})",
                    f"{_f(d['first_paint_s'])} s ({_f(d['first_paint_cpu_s'])} server CPU-s; median of {d['runs']})",
                    "-", d["first_paint_s"] < 3.0))
        if d.get("change_s_median") is not None:
            out.append(("a filter or window change < 1 s", f"median {_f(d['change_s_median'])} s, max "
                        f"{_f(d['change_s_max'])} s ({_f(d['change_cpu_s_median'])} CPU-s)", "-",
                        d["change_s_max"] < 1.0))
        out.append(("dashboard memory < 1 GB, flat as visitors change filters",
                    f"max {_f(d['rss_gb_max'])} GB after a paint (peak {_f(d['rss_peak_gb'])} GB), "
                    f"{d['rss_growth_gb'] * 1000:+.0f} MB over the changes", "-",
                    d["rss_gb_max"] < 1.0 and d["rss_peak_gb"] < 1.0 and d["rss_growth_gb"] < 0.05))
    elif d:
        out.append(("dashboard: first paint < 3 s, a change < 1 s, memory < 1 GB and flat", "not measured: "
                    + d["skipped"], "-", None))
    rows = list(res.get("ingest", []))
    if res.get("delta"):
        rows.append(dict(res["delta"], engine="vllm 0.32 delta log"))
    if res.get("mixed"):
        rows.append(res["mixed"])
    for r in rows:
        ing, base = r["ingest"], r["baseline"]
        x = base["wall_s"] / ing["wall_s"]
        peak = ing["peak_rss"]
        measured = peak > 0
        fig = f"**{x:.1f}x** ({_f(ing['wall_s'])} s" + (f", {_f(ing['cpu_s'])} CPU-s" if ing.get("cpu_s") else "") + ")"
        if ing.get("cpu_s") and base.get("cpu_s"):
            fig += f"; in CPU-s {base['cpu_s'] / ing['cpu_s']:.1f}x"
        fig += f", peak {peak / MiB:,.0f} MiB" if measured else ", peak not measured (in-process)"
        out.append((f"{r['engine']}: ingest >= 5x the Python loop, peak < 1 GB ({_mb(r['bytes'])})", fig,
                    f"Python loop {_f(base['wall_s'])} s" + (f" ({_f(base['cpu_s'])} CPU-s)" if base.get("cpu_s") else "")
                    + f"; then rollup refresh {_f(ing.get('rollup_s', 0.0))} s",
                    (x >= 5 and peak < GB) if measured else (False if x < 5 else None)))
    return out


def other_targets(res: dict) -> list[tuple[str, str, bool | None]]:
    out = []
    mem = res.get("memory")
    small = next((r for r in res.get("ingest", []) if mem and r["engine"] == mem["engine"]), None)
    if mem and small:
        big_rss, small_rss = mem["ingest"]["peak_rss"], small["ingest"]["peak_rss"]
        out.append((f"peak memory flat: {_mb(mem['bytes'])} input <= {_mb(small['bytes'])} input (+10% noise), < 1 GiB",
                    f"{big_rss / MiB:,.0f} vs {small_rss / MiB:,.0f} MiB",
                    big_rss <= small_rss * 1.10 and big_rss < 2**30))
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
        *(["Minutes per part: " + ", ".join(f"{k} {v / 60:.1f}" for k, v in res["part_s"].items()) + ".", ""]
          if res.get("part_s") else []),
        *(["**In-process timing** (`--in-process`): ingest and baseline are library calls in one process, "
            "without interpreter start-up; no peak RSS.", ""] if a.get("in_process") else []),
        *([f"Taken from an earlier run of bench/run.py (part: {', '.join(res['merged']['parts'])}; {res['merged']['started']}, "
           f"commit {res['merged']['commit']}, load {res['merged']['load_start']} -> {res['merged']['load_end']}, "
           f"{res['merged']['total_s'] / 60:.1f} min); the rest from this run.", ""] if res.get("merged") else []),
        "Inputs: simulator logs (`steady` scenario, each engine's default format variant), read from the page "
        "cache (all runs warm). Peak memory is the child process's maximum RSS (wait4); CPU seconds are the "
        "child's user + system time (all threads), the steadier figure on a shared machine.",
        "",
        "Sizes: " + "; ".join(x for x in (
            f"{a['size_gb']:g} GB per engine ({', '.join(a.get('engines') or [])}), {a['big_gb']:g} GB for the memory test"
            if "ingest" in a["only"] else "",
            f"the vLLM 0.32 delta log {a.get('delta_lines', 0):,} lines" if "delta" in a["only"] else "",
            f"the vLLM stats / access mix {a.get('mixed_lines', 0):,} lines" if "mixed" in a["only"] else "",
            f"query store >= {a['requests']:,} requests, count(*) store {a.get('parts', 0):,} parts"
            if "query" in a["only"] else "",
            f"dashboard {a.get('dash_runs')} run(s) of {a.get('dash_changes')} changes" if "dash" in a["only"] else "",
        ) if x) + ".",
        "",
    ]
    tg = targets(res)
    if tg:
        lines += ["## Targets of issue 20", "",
                  "Each target beside this run's figure and the same-run baseline (`-`: none). Query figures are "
                  "`servelens sql` end to end (a fresh process, Python start-up included); met = wall seconds "
                  "under the target (ingest: the median run; the dashboard change: the slowest change; memory flat: "
                  "< 50 MB growth). `n/a`: the store or part count is smaller than the target's, so the figure "
                  "cannot meet it.", "",
                  "| target | figure | same-run baseline | met |", "|---|---|---|---|"]
        for name, val, base, ok in tg:
            lines.append(f"| {name} | {val} | {base} | {'yes' if ok else ('n/a' if ok is None else '**no**')} |")
        lines.append("")
        fl = (res.get("query") or {}).get("cli_floor")
        if fl:
            lines += [f"The floor of every `servelens sql` figure, `servelens sql \"select 1\"` on the query store "
                      f"(Python start-up, imports, opening the store): {_cli(fl)}.", ""]
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
                f"{ing['wall_s'] / floor_s:.0f}x | {_f(ing.get('rollup_s', 0.0))} s"
                + (f", peak {ing['rollup_peak_rss'] / MiB:,.0f} MiB |" if ing.get("rollup_peak_rss") else " |")
            )
        lines += ["", "`servelens ingest` parses and stores, then refreshes the rollups (the stored "
                  "`window_metrics`, pipeline/query/rollups.py) of the instances it touched: timed apart in the "
                  "last column (`ingest --no-rollups`, then `rollup.refresh` in a process of its own), since the Python loop "
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
            "(pipeline/query/rollups.py, rebuilt after the copies); the raw path computes them from the events "
            "(`servelens sql --no-rollups`, one run, with "
            + (f"`SERVELENS_QUERY_MEMORY={q['views'].get('scaling_signals', {}).get('cli_raw', {}).get('memory')}` "
               f"`SERVELENS_SPILL_SIZE={q['views'].get('scaling_signals', {}).get('cli_raw', {}).get('spill')}`"
               if q["views"].get("scaling_signals", {}).get("cli_raw") else "raised limits")
            + ", since the default 4 GB stops it on this store).",
            "",
            "| view | rows | in-process: first run | in-process: median | CPU-s | `servelens sql` (shipped) | "
            "`servelens sql --no-rollups` |",
            "|---|---|---|---|---|---|---|",
        ]
        if q.get("rollup_refresh"):
            rr = q["rollup_refresh"]
            lines[-4:-4] = [f"Rollup rebuilt after the copies: {_f(rr['wall_s'], 1)} s ({_f(rr['cpu_s'], 1)} CPU-s), "
                            f"{rr['rows']:,} rows.", ""]
        for name, v in q["views"].items():
            sh = v.get("shipped", {})
            lines.append(
                f"| {name} | {sh.get('rows', 0):,} | {_qt(sh, 'first_s')} | **{_qt(sh, 'median_s')}** | "
                f"{_f(sh.get('cpu_s'))} | {_cli(v.get('cli'))} | {_cli(v.get('cli_raw')) if v.get('cli_raw') else '-'} |")
        lines.append("")
        rg = q.get("range")
        if rg:
            lines += [
                "### A 1-hour range", "",
                f"`servelens sql \"select * from latency_percentiles\" --since {rg['since']} --until {rg['until']}` "
                "(the hour in the middle of the store's span; the scans read only that range), and the same view "
                "over the whole store:", "",
                "| query | rows | `servelens sql` | runs (s) |", "|---|---|---|---|",
                f"| 1 hour | {rg['hour'].get('rows', 0):,} | **{_cli(rg['hour'])}** | "
                f"{', '.join(_f(x) for x in rg['hour'].get('walls', []))} |",
                f"| whole store | {rg['whole'].get('rows', 0):,} | {_cli(rg['whole'])} | "
                f"{', '.join(_f(x) for x in rg['whole'].get('walls', []))} |", "",
            ]
    pc = res.get("parts")
    if pc:
        lines += [
            "## count(*) against the part count", "",
            f"The sample incident's {pc['events']:,} events written as {pc['parts']:,} committed parts "
            "(`bench/partcount.py`), `servelens sql \"select count(*) as n from events\"`; then `servelens compact` "
            f"({_f(pc['compact_s'], 1)} s) and the same query ({pc['count_after']:,} rows counted after).", "",
            "| parts | `servelens sql` | runs (s) |", "|---|---|---|",
            f"| {pc['parts']:,} | **{_cli(pc['count'])}** | {', '.join(_f(x) for x in pc['count'].get('walls', []))} |",
            f"| {pc['compacted_parts']:,} (compacted) | {_cli(pc['compacted'])} | "
            f"{', '.join(_f(x) for x in pc['compacted'].get('walls', []))} |", "",
        ]
    dl = res.get("delta")
    if dl:
        ing, base = dl["ingest"], dl["baseline"]
        lines += [
            "## Delta-heavy vLLM 0.32 log (the real-vLLM issue)", "",
            f"The recorded vLLM 0.32 server log of `sample_logs/vllm/real-0.32-b` (output logging on), its request "
            f"part repeated with fresh ids and times (`bench/real_delta.py`) to {dl['lines']:,} lines "
            f"({_mb(dl['bytes'])}, {dl['delta_lines']:,} `streaming delta` lines). Baseline: the vLLM Python loop of "
            "`bench/baseline.py`, which reads each line's header and keeps each delta line as one `log` row; "
            "servelens also folds them into `request_output` events and derives TTFT (the loop does less work).", "",
            "| input | servelens ingest | CPU-s | lines/s | peak RSS | events | request_output | finished / with TTFT | "
            "Python loop | speed-up | then: rollup refresh |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
            f"| {_mb(dl['bytes'])} | {_f(ing['wall_s'])} s | {_f(ing.get('cpu_s'))} | {dl['lines'] / ing['wall_s']:,.0f} | "
            f"{ing['peak_rss'] / MiB:,.0f} MiB | {ing['events']:,} | {dl['outputs']:,} | {dl['finished']:,} / "
            f"{dl['with_ttft']:,} | {_f(base['wall_s'])} s ({base['rows']:,} rows) | **{base['wall_s'] / ing['wall_s']:.1f}x** | "
            f"{_f(ing.get('rollup_s', 0.0))} s |", "",
            "Runs (s): ingest " + ", ".join(_f(x) for x in ing["walls"]) + "; baseline "
            + ", ".join(_f(x) for x in base["walls"]) + ".", "",
        ]
    mx = res.get("mixed")
    if mx:
        ing, base = mx["ingest"], mx["baseline"]
        lines += [
            "## A vLLM log of half stats lines, half access lines", "",
            "The real `Engine 000:` stats lines and uvicorn access lines of the recorded vLLM 0.32 server of "
            "`sample_logs/vllm/real-0.32-overload`, alternated one stats line a second (`bench/real_mixed.py`) to "
            f"{mx['lines']:,} lines ({_mb(mx['bytes'])}). Baseline: the vLLM Python loop of `bench/baseline.py`, "
            "which reads both kinds of line. Stored: the events the store holds of each kind, against the "
            "builder's own count of the lines it wrote.", "",
            "| input | servelens ingest | CPU-s | peak RSS | stats stored / written | access stored / written | "
            "Python loop | speed-up (wall / CPU) |",
            "|---|---|---|---|---|---|---|---|",
            f"| {_mb(mx['bytes'])} | {_f(ing['wall_s'])} s | {_f(ing.get('cpu_s'))} | {ing['peak_rss'] / MiB:,.0f} MiB | "
            f"{mx['stored_stats']:,} / {mx['stats_lines']:,} | {mx['stored_access']:,} / {mx['access_lines']:,} | "
            f"{_f(base['wall_s'])} s ({_f(base.get('cpu_s'))} CPU-s) | **{base['wall_s'] / ing['wall_s']:.1f}x** / "
            + (f"{base['cpu_s'] / ing['cpu_s']:.1f}x |" if ing.get("cpu_s") and base.get("cpu_s") else "- |"), "",
            "Runs (s): ingest " + ", ".join(_f(x) for x in ing["walls"]) + "; baseline "
            + ", ".join(_f(x) for x in base["walls"]) + ".", "",
        ]
    d = res.get("dash")
    if d:
        lines += ["## Dashboard", ""]
        if "skipped" in d:
            lines += [f"Not measured: {d['skipped']}.", ""]
        else:
            lines += [
                "`bench/dashbench.py` on the query store: the real `servelens dashboard` driven by Playwright in "
                "headless Chromium; first paint = the Overview page's run over and its charts drawn; a change = one "
                "sidebar action (window width, one instance, all instances) until the page states the new filters "
                "with nothing stale; RSS of the server process (DuckDB included).", "",
                "| figure | value |", "|---|---|",
                f"| first paint (runs: {', '.join(_f(x) for x in d['first_paint_all'])} s) | **{_f(d['first_paint_s'])} s** "
                f"({_f(d['first_paint_cpu_s'])} server CPU-s) |",
                f"| change: median / max | **{_f(d.get('change_s_median'))} s** / {_f(d.get('change_s_max'))} s "
                f"({_f(d.get('change_cpu_s_median'))} CPU-s median) |",
                f"| server RSS: max after a paint / peak | {_f(d['rss_gb_max'])} GB / {_f(d['rss_peak_gb'])} GB |",
                f"| RSS growth over the changes | {d['rss_growth_gb'] * 1000:+.0f} MB |",
                f"| load average during | {_f(d['load_min'], 1)}-{_f(d['load_max'], 1)} |", "",
            ]
            if d.get("changes"):
                lines += ["Changes (s): " + "; ".join(f"{c['change']} {_f(c['s'])}" for c in d["changes"]) + ".", ""]
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
    ot = other_targets(res)
    if ot:
        lines += ["## Other targets", "", "| target | measured | met |", "|---|---|---|"]
        for name, val, ok in ot:
            lines.append(f"| {name} | {val} | {'yes' if ok else ('n/a' if ok is None else '**no**')} |")
        lines.append("")
    return "\n".join(lines)
