"""What `servelens dashboard` execs: Streamlit's own command line (`streamlit run ...`), with
a warm-up thread started first.

Streamlit runs nothing of the app until the first visitor opens the page, so that visitor
used to pay every one-time cost: importing Altair and the page's modules, building the
store's connection and evaluating the views every chart shares (`data._Connection`), and
Altair's first chart validation (its JSON-schema registry), and every query of the first
page; and each first change of the window width paid that width's per-window views. The
warm-up does these first (the first page's queries for the filters a new visitor starts
from, into the caches the page reads); the other
widths the sidebar offers only once the first page has been drawn (or nobody came within
OTHERS_AFTER_S), one at a time: evaluated at once they competed with the first visitor for
the machine's cores (on a 10M-request store, 4 widths of ~7 CPU-s each during a first paint
on 2 cores). The warm-up pays them while the server starts, in a daemon thread of the same
process: the connection lands in the same
`st.cache_resource` entry the page asks for (a visitor arriving before it is done waits for
it under Streamlit's per-entry lock instead of building a second one). A failure here is
only one line on stderr: the page then meets the same error and shows it in one line.

    python -m servelens.dashboards.serve run APP [streamlit options] -- --store DIR ...
"""

from __future__ import annotations

import gc
import sys
import threading
import time

# how long the warm-up waits for a first page to be drawn before it evaluates the other widths
OTHERS_AFTER_S = 60.0
# and then, before each of them, for this long a pause in the visits (a visitor changing
# filters is not made to wait for a width nobody asked for)
IDLE_S = 3.0
# on a store where one width costs seconds (millions of requests), a width nobody
# asked for must not be what a visitor's next change waits for: there the pause is longer
# (a visitor reading the page, not one changing filters)
SLOW_WIDTH_S = 1.0
IDLE_SLOW_S = 30.0


def other_widths(default: float) -> list[float]:
    """The sidebar's widths but the default, the nearest steps of its slider first (the wider
    of two as near)."""
    from servelens.dashboards import sidebar

    widths = list(sidebar.WINDOWS.values())
    at = widths.index(default) if default in widths else 0
    return [w for _, _, w in sorted((abs(k - at), -k, w) for k, w in enumerate(widths) if w != default)]


def app_args(argv: list[str]) -> list[str]:
    """The app's own arguments: what follows `--` on Streamlit's command line."""
    return argv[argv.index("--") + 1:] if "--" in argv else []


def warm(args: list[str], others_after_s: float = OTHERS_AFTER_S, idle_s: float = IDLE_S) -> float:
    """Import what the Overview page imports, build the store's shared connection with the
    default window's views, validate one chart (Altair's schema registry is built on first
    use), compute the first page's query results (`data.warm_page`); then, once a page has been drawn (`data.page_drawn`) or after `others_after_s`,
    evaluate the per-window views of the sidebar's other widths (so that a later change of
    width finds them), each after a pause of `idle_s` in the visits (IDLE_SLOW_S where the
    width before it took SLOW_WIDTH_S or more to derive, or its cost is unknown). Returns the
    seconds it took."""
    t0 = time.perf_counter()
    from servelens.dashboards import data, sidebar  # the page's imports
    from servelens.pipeline.report import chart_specs, verdict  # noqa: F401

    cfg = data.settings(args)
    conn = data.warm(cfg)  # what the first page needs, first
    chart_specs.warm()
    # what the process holds now (the modules, Altair's schema, the connection) lives as long
    # as the server: out of the collector's sight, Streamlit's full collection after every
    # script run only walks what the runs made
    gc.freeze()
    # then the first page itself, for the filters a new visitor starts from
    cat = data.catalog(cfg)
    first = sidebar.resolve(sidebar.default_spec(cfg, cat), cat)
    if first is not None and first.targets:
        data.warm_page(cfg, first)
    default = float(data.thresholds(cfg.thresholds)["window_s"])
    data.FIRST_PAGE_DRAWN.wait(others_after_s)  # not while the first visitor waits for the page
    # then every width the sidebar offers, one at a time, each after a pause as long as what
    # deriving a width costs asks: the default width's cost when it was derived; when its rows
    # were read from the store's rollups, which says nothing of a derived width's, the long
    # pause until a derived width has shown its cost
    took = None if conn.stored_width == default else _cost(conn, default)
    for width in other_widths(default)[:data.WIDTHS_KEPT - 1]:
        pause = idle_s if took is not None and took < SLOW_WIDTH_S else max(idle_s, IDLE_SLOW_S)
        conn = data.warm(cfg, (width,), pause)
        took = _cost(conn, width)
    return time.perf_counter() - t0


def _cost(conn, width: float) -> float:
    """Seconds the connection spent deriving the per-window views of `width`."""
    return sum(s for _, w, s in conn.evaluated if w == width)


def _warm_in_background(args: list[str]) -> None:
    try:
        took = warm(args)
        print(f"servelens dashboard: store views ready in {took:.1f} s", file=sys.stderr, flush=True)
    except Exception as e:  # noqa: BLE001 - the page reports the same error to the visitor
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"servelens dashboard: warm-up failed ({why}); the page will say why", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    threading.Thread(target=_warm_in_background, args=(app_args(argv),), name="servelens-warmup", daemon=True).start()
    from streamlit.web.cli import main as streamlit_main

    from servelens.dashboards.access import guard_cache_clearing, guard_git_info

    guard_cache_clearing()
    guard_git_info()

    sys.argv = ["streamlit", *argv]
    streamlit_main(prog_name="streamlit")


if __name__ == "__main__":
    main()
