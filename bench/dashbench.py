"""Dashboard benchmark: first paint, filter and window changes, and the server's memory, on
the real `servelens dashboard` driven by headless Chromium (Playwright), as a visitor sees it.

    python bench/dashbench.py --store incident            # sample_logs/incident, ingested once
    python bench/dashbench.py --store big --events 5e6     # simulator logs, copied in time
    python bench/dashbench.py --store /path/to/store       # an existing store

What is measured, per run (a fresh server each run, so the first paint pays every cost a
new visitor of a just-started dashboard pays):

- first paint: from `page.goto` until the Overview page has finished its script run and
  every chart of it is drawn (Streamlit's status widget gone, the "Slowest requests"
  section there, and each Vega chart holding its canvas/svg);
- each change (window width, one instance, back to all instances, a narrower time range,
  ...): from the sidebar action until the rerun is done and the charts are drawn again;
- the server process's RSS (`/proc/PID/status` VmRSS, the streamlit process
  `servelens dashboard` execs into, DuckDB included) after the first paint and after every
  change, and its peak (VmHWM);
- the load average (/proc/loadavg) beside every figure: the machine is shared.

The medians over `--runs` runs are printed beside the targets of issue 20 (first paint < 3 s,
a change < 1 s, memory < 1 GB and flat as visitors change filters). `--json` keeps the raw
figures.

The big store: `bench/gen.py`'s vLLM and TGI simulator logs (4 instances each) ingested once,
then copies of their events shifted in time after the previous copy (fresh request ids, as
if the servers had run on), committed through the store's own staging and commit until the
store holds `--events` events: a long-running fleet of 8 instances, not 100s of replicas.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

CHROMIUM = os.environ.get("SERVELENS_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TARGETS = {"first_paint_s": 3.0, "change_s": 1.0, "rss_gb": 1.0}
GEN_BYTES = {"vllm": 40_000_000, "tgi": 28_000_000}


def log(msg: str) -> None:
    print(f"[dashbench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def servelens_bin() -> str:
    exe = Path(sys.executable).parent / "servelens"
    return str(exe) if exe.exists() else (shutil.which("servelens") or "servelens")


# --- stores ------------------------------------------------------------------------------


def incident_store(data_dir: Path) -> Path:
    store = data_dir / "incident"
    if not (store / "manifest.json").exists():
        shutil.rmtree(store, ignore_errors=True)
        subprocess.run([servelens_bin(), "ingest", str(REPO / "sample_logs" / "incident"), "--store", str(store), "-q"],
                       check=True, stdout=subprocess.DEVNULL)
    return store


def big_store(data_dir: Path, events: int) -> Path:
    """>= `events` events: simulator logs ingested once, then copies shifted in time."""
    import gen
    import polars as pl
    import pyarrow.parquet as pq

    from servelens.pipeline.store.layout import with_partition_columns
    from servelens.pipeline.store.commit import Store, new_txid
    from servelens.pipeline.store.manifest import committed_parts

    store = data_dir / f"big-{events}"
    stamp = store / "bench-stamp.json"
    if stamp.exists() and json.loads(stamp.read_text()).get("events_target") == events:
        return store
    shutil.rmtree(store, ignore_errors=True)
    t0 = time.perf_counter()
    for engine, size in GEN_BYTES.items():
        g = gen.generate(engine, size, data_dir / f"gen-{engine}")
        subprocess.run([servelens_bin(), "ingest", str(g.dir), "--store", str(store), "-q"], check=True,
                       stdout=subprocess.DEVNULL)
    parts = committed_parts(store)
    base = pl.concat([pl.from_arrow(with_partition_columns(pq.read_table(p), p.relative_to(store))) for p in parts],
                     how="vertical_relaxed")
    lo, hi = base["ts"].min(), base["ts"].max()
    shift = (hi - lo) + dt.timedelta(seconds=gen.GAP_S)
    copies = max(0, -(-events // base.height) - 1)
    log(f"base: {base.height:,} events over {hi - lo}; {copies} copies shifted by {shift} each")
    with Store.open(store, purpose="dashbench copies") as st:
        for k in range(1, copies + 1):
            ev = base.with_columns(
                pl.col("ts") + shift * k,
                pl.col("wrapper_ts") + shift * k,
                pl.col("request_id") + f"-c{k}",
                pl.col("source") + f"#c{k}",
            )
            st.commit(st.stage_events(ev, new_txid()))
    n = base.height * (copies + 1)
    stamp.write_text(json.dumps({"events_target": events, "events": n, "copies": copies,
                                 "build_s": time.perf_counter() - t0}))
    log(f"big store: {n:,} events, {len(committed_parts(store))} parts, built in {time.perf_counter() - t0:.0f} s")
    return store


# --- the server --------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_bytes(pid: int, field: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of the server so far."""
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def browser_cpu_s(exclude: int) -> float:
    """User + system CPU seconds so far of this process's descendants but `exclude` (the
    server): Playwright's driver and the Chromium processes drawing the page."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    total, todo = 0.0, list(children.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        if pid == exclude:
            continue
        try:
            total += cpu_s(pid)
        except (OSError, IndexError, ValueError):
            continue
        todo.extend(children.get(pid, []))
    return total


class Server:
    def __init__(self, store: Path, extra: list[str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"dashbench-{self.port}.log"
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen([servelens_bin(), "dashboard", "--store", str(store), "--port", str(self.port),
                                          *(extra or [])], stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"servelens dashboard exited: {self.log_path.read_text()}")
            try:
                with urllib.request.urlopen(f"{self.url}/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"servelens dashboard did not answer: {self.log_path.read_text()}")
            time.sleep(0.2)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# --- the browser -------------------------------------------------------------------------

DRAWN_JS = """(expect) => {
    if (document.querySelector('[data-testid="stStatusWidget"]')) return false;
    // an element of the previous run not yet drawn again by this one
    if (document.querySelector('[data-stale="true"]')) return false;
    if (document.querySelector('[data-testid="stException"]')) return 'exception';
    const main = document.querySelector('[data-testid="stMain"]');
    if (!main || !main.innerText.includes('Slowest requests')) return false;
    if (expect && !main.innerText.includes(expect)) return false;
    const charts = main.querySelectorAll('[data-testid="stVegaLiteChart"]');
    if (charts.length === 0) return false;
    let shown = 0;  // charts in a hidden tab are not painted until the tab is opened
    for (const c of charts) {
        if (c.getBoundingClientRect().width === 0) continue;
        if (!c.querySelector('canvas, svg')) return false;
        shown += 1;
    }
    return shown;
}"""


def wait_drawn(pg, since: float, timeout_s: float = 300.0, started: bool = False, expect: str | None = None) -> tuple[float, int]:
    """Seconds from `since` until the page's script run is over and its charts are drawn:
    no status widget, no stale element, `expect` in the page (the caption that states the
    filters: "window 300 s", "1 instance(s)"), every chart shown holding its drawing.
    `started` (without `expect`): wait first for the rerun to begin (the status widget
    appears, up to 3 s), so that the previous run's charts are not taken for the new ones;
    `expect` tells the new run's page apart without that wait."""
    deadline = time.monotonic() + timeout_s
    if started and expect is None:
        try:
            pg.wait_for_selector('[data-testid="stStatusWidget"]', state="attached", timeout=3_000)
        except Exception:  # a rerun faster than the poll: it may be over already
            pass
    while time.monotonic() < deadline:
        r = pg.evaluate(DRAWN_JS, expect)
        if r == "exception":
            raise SystemExit("the page shows an exception: " + pg.locator('[data-testid="stException"]').first.inner_text()[:500])
        if r:
            return time.perf_counter() - since, int(r)
        pg.wait_for_timeout(25)
    raise SystemExit(f"the page was not drawn within {timeout_s:.0f} s")


WINDOW_S = {"30 s": 30.0, "1 min": 60.0, "2 min": 120.0, "5 min": 300.0, "15 min": 900.0}  # sidebar.WINDOWS


def pick_window(pg, label: str) -> float:
    """Move the sidebar's Window select-slider to `label` with the keyboard; returns the time
    of the key press that triggers the rerun."""
    slider = pg.locator('[data-testid="stSidebar"] input[type="range"][aria-label="Window"]')
    labels = list(WINDOW_S)
    now = slider.get_attribute("aria-valuetext") or "1 min"
    steps = labels.index(label) - labels.index(now)
    slider.focus()
    t0 = time.perf_counter()
    for _ in range(abs(steps)):
        slider.press("ArrowRight" if steps > 0 else "ArrowLeft")
    return t0


def _instance_box(pg):
    return pg.locator('[data-testid="stSidebar"] [data-testid="stMultiSelect"]').nth(1)


def pick_instance(pg, name: str | None) -> float:
    """One instance in the sidebar's Instance multiselect (None: clear it, all instances);
    returns the time of the click that triggers the rerun."""
    box = _instance_box(pg)
    if name is None:
        clear = box.locator('[aria-label="Clear all"], [title="Clear all"]').first
        t0 = time.perf_counter()
        clear.click()
        return t0
    box.locator("input").click()
    option = pg.get_by_role("option", name=name, exact=True)
    option.wait_for()
    t0 = time.perf_counter()
    option.click()
    return t0


def first_instances(pg) -> list[str]:
    _instance_box(pg).locator("input").click()
    # the first option of a Streamlit multiselect is "Select all"
    names = [t for t in (o.inner_text().strip() for o in pg.get_by_role("option").all()) if t != "Select all"]
    pg.keyboard.press("Escape")
    return names


# what a visitor does after the first paint, in turn: a new window width, one instance, another
# new width, back to all instances, back to a width seen before, another instance, all
# instances, back to the first width. Each window change is one step of the slider (one key
# press): several steps would rerun the page once per step.
CHANGES = ("window 2 min", "instance first", "window 5 min", "all instances", "window 2 min", "instance last",
           "all instances", "window 1 min")


def one_run(browser, store: Path, n_changes: int, settle_s: float = 0.0) -> dict:
    srv = Server(store)
    if settle_s:
        time.sleep(settle_s)  # a visitor arriving a while after the start (the warm-up done)
    out: dict = {"changes": []}
    try:
        out["rss_idle"] = rss_bytes(srv.proc.pid)
        ctx = browser.new_context(viewport={"width": 1440, "height": 2000})
        pg = ctx.new_page()
        cpu0 = cpu_s(srv.proc.pid)
        # the server's CPU from its start until it answers (its warm-up, dashboards/serve.py,
        # may still be running then: the rest of it is in the first paint's CPU)
        out["startup_cpu_s"] = cpu0
        bcpu0 = browser_cpu_s(srv.proc.pid)
        t0 = time.perf_counter()
        pg.goto(srv.url + "/")
        out["first_paint_s"], out["charts"] = wait_drawn(pg, t0)
        out["first_paint_cpu_s"] = cpu_s(srv.proc.pid) - cpu0
        out["first_paint_browser_cpu_s"] = browser_cpu_s(srv.proc.pid) - bcpu0
        out["first_paint_load"] = loadavg()
        out["rss_first"] = rss_bytes(srv.proc.pid)
        log(f"first paint {out['first_paint_s']:.2f} s ({out['first_paint_cpu_s']:.2f} server CPU-s; "
            f"{out['startup_cpu_s']:.2f} CPU-s before it, starting; browser {out['first_paint_browser_cpu_s']:.2f} CPU-s), "
            f"{out['charts']} charts, RSS {out['rss_first'] / 1e9:.2f} GB, load {out['first_paint_load']:.2f}")
        names = first_instances(pg)
        caption = re.search(r"(\d+) instance\(s\) · window (\d+) s", pg.locator('[data-testid="stMain"]').inner_text())
        every, window = int(caption.group(1)), float(caption.group(2))
        shown = every
        for k in range(n_changes):
            what = CHANGES[k % len(CHANGES)]
            cpu0, bcpu0 = cpu_s(srv.proc.pid), browser_cpu_s(srv.proc.pid)
            if what.startswith("window"):
                label = what.split(" ", 1)[1]
                t0 = pick_window(pg, label)
                window = WINDOW_S[label]
            elif what.startswith("instance"):
                t0 = pick_instance(pg, names[0] if what.endswith("first") else names[-1])
                shown = 1
            else:
                t0 = pick_instance(pg, None)
                shown = every
            s, charts = wait_drawn(pg, t0, started=True, expect=f"{shown} instance(s) · window {window:g} s")
            row = {"change": what, "s": s, "cpu_s": cpu_s(srv.proc.pid) - cpu0,
                   "browser_cpu_s": browser_cpu_s(srv.proc.pid) - bcpu0, "charts": charts,
                   "rss": rss_bytes(srv.proc.pid), "load": loadavg()}
            out["changes"].append(row)
            log(f"  {what}: {s:.2f} s ({row['cpu_s']:.2f} CPU-s, browser {row['browser_cpu_s']:.2f}), {charts} charts, RSS {row['rss'] / 1e9:.2f} GB, "
                f"load {row['load']:.2f}")
        out["rss_peak"] = rss_bytes(srv.proc.pid, "VmHWM")
        ctx.close()
    finally:
        srv.stop()
    return out


def summarize(name: str, runs: list[dict]) -> dict:
    fp = [r["first_paint_s"] for r in runs]
    ch = [c["s"] for r in runs for c in r["changes"]]
    rss = [max([r["rss_first"], *(c["rss"] for c in r["changes"])]) for r in runs]
    growth = [(r["changes"][-1]["rss"] - r["rss_first"]) if r["changes"] else 0 for r in runs]
    loads = [r["first_paint_load"] for r in runs] + [c["load"] for r in runs for c in r["changes"]]
    s = {"store": name, "runs": len(runs),
         "first_paint_s": statistics.median(fp), "first_paint_all": fp,
         "first_paint_cpu_s": statistics.median(r["first_paint_cpu_s"] for r in runs),
         "startup_cpu_s": statistics.median(r["startup_cpu_s"] for r in runs),
         "first_paint_browser_cpu_s": statistics.median(r["first_paint_browser_cpu_s"] for r in runs),
         "change_browser_cpu_s_median": statistics.median(c["browser_cpu_s"] for r in runs for c in r["changes"]) if ch else None,
         "change_s_median": statistics.median(ch) if ch else None, "change_s_max": max(ch) if ch else None,
         "change_cpu_s_median": statistics.median(c["cpu_s"] for r in runs for c in r["changes"]) if ch else None,
         "rss_gb_max": max(rss) / 1e9, "rss_growth_gb": statistics.median(growth) / 1e9,
         "rss_peak_gb": max(r["rss_peak"] for r in runs) / 1e9,
         "load_min": min(loads), "load_max": max(loads)}
    return s


def print_table(rows: list[dict]) -> None:
    print("| store | figure | value | target | load avg |")
    print("|---|---|---|---|---|")
    for s in rows:
        ld = f"{s['load_min']:.1f}-{s['load_max']:.1f}"
        fp = "/".join(f"{x:.1f}" for x in s["first_paint_all"])
        print(f"| {s['store']} | first paint (median of {s['runs']}; runs {fp} s) | {s['first_paint_s']:.2f} s "
              f"({s['first_paint_cpu_s']:.1f} server CPU-s, {s['startup_cpu_s']:.1f} before it; browser {s['first_paint_browser_cpu_s']:.1f} CPU-s) | < {TARGETS['first_paint_s']:g} s | {ld} |")
        if s["change_s_median"] is not None:
            print(f"| {s['store']} | filter / window change (median; max) | {s['change_s_median']:.2f} s; "
                  f"{s['change_s_max']:.2f} s ({s['change_cpu_s_median']:.2f} server CPU-s; browser {s['change_browser_cpu_s_median']:.2f}) | < {TARGETS['change_s']:g} s | {ld} |")
        print(f"| {s['store']} | server RSS (max after a paint; peak) | {s['rss_gb_max']:.2f} GB; {s['rss_peak_gb']:.2f} GB "
              f"| < {TARGETS['rss_gb']:g} GB | {ld} |")
        print(f"| {s['store']} | RSS growth over the changes (median) | {s['rss_growth_gb'] * 1000:+.0f} MB | flat | {ld} |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--store", action="append", default=None,
                   help="'incident', 'big' (built with --events) or a store directory; repeatable")
    p.add_argument("--events", type=float, default=5e6, help="events in the big store (default 5M)")
    p.add_argument("--runs", type=int, default=3, help="fresh servers per store, median reported")
    p.add_argument("--changes", type=int, default=8, help="filter / window changes per run")
    p.add_argument("--data-dir", type=Path, default=HERE / "data" / "dashbench")
    p.add_argument("--settle", type=float, default=0.0,
                   help="seconds between the server answering and the first visit (default 0: at once)")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--build-only", action="store_true", help="build the stores and stop")
    a = p.parse_args(argv)
    a.data_dir.mkdir(parents=True, exist_ok=True)
    stores = []
    for s in a.store or ["incident"]:
        if s == "incident":
            stores.append(("incident", incident_store(a.data_dir)))
        elif s == "big":
            stores.append((f"{a.events / 1e6:g}M events", big_store(a.data_dir, int(a.events))))
        else:
            stores.append((Path(s).name, Path(s)))
    if a.build_only:
        return 0
    if not os.access(CHROMIUM, os.X_OK):
        raise SystemExit(f"Chromium not found at {CHROMIUM}: run tests/e2e/install_browser.sh as root")
    from playwright.sync_api import sync_playwright

    rows, raw = [], {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for name, store in stores:
            log(f"{name}: {store}")
            runs = [one_run(browser, store, a.changes, a.settle) for _ in range(a.runs)]
            raw[name] = runs
            rows.append(summarize(name, runs))
        browser.close()
    print_table(rows)
    if a.json:
        a.json.write_text(json.dumps({"summary": rows, "runs": raw}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
