"""`servelens top`: a live view of a store in a terminal, the way htop shows processes.

One row per instance with what the exporter publishes (pipeline/serve/snapshot.py): the queue,
running requests, KV-cache usage, throughput, p50/p99 TTFT and end-to-end latency of its
latest complete window, the age of its newest event and its active signals. The snapshot is
read again when the store commits (a tailer's store grows), at most once per interval; the
screen is redrawn every interval (the ages move). Keys sort and filter; `q` quits.

Plain terminal control only (alternate screen, clear, cbreak input through termios): it runs
over SSH in any terminal, with no browser and no curses dependency on the terminal's
database. Without a terminal (a pipe, a script) it prints one frame and exits.
"""

from __future__ import annotations

import datetime as dt
import io
import os
import select
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

# key -> (column it sorts by, title shown, highest first)
SORT_KEYS: dict[str, tuple[str, str, bool]] = {
    "w": ("waiting", "queue", True),
    "r": ("running", "running", True),
    "k": ("kv_usage", "KV", True),
    "t": ("tokens_per_second", "throughput", True),
    "f": ("p99_ttft_s", "p99 TTFT", True),
    "e": ("p99_e2e_s", "p99 e2e", True),
    "n": ("server", "name", False),
}
HELP = "q quit  w queue  r running  k KV  t throughput  f TTFT  e e2e  n name (again: reverse)  / filter  Esc clear"
CLEAR = "\x1b[H\x1b[2J"
ALT_ON, ALT_OFF = "\x1b[?1049h\x1b[?25l", "\x1b[?25h\x1b[?1049l"


@dataclass
class View:
    """What the screen shows: the sort, its direction and the filter (typed after `/`)."""

    sort: str = "w"
    descending: bool = True
    filter: str = ""
    typing: str | None = None  # the filter being typed, None when not typing
    quit: bool = False

    def key(self, ch: str) -> None:
        if self.typing is not None:
            if ch in ("\r", "\n"):
                self.filter, self.typing = self.typing, None
            elif ch == "\x1b":
                self.typing = None
            elif ch in ("\x7f", "\b"):
                self.typing = self.typing[:-1]
            elif ch.isprintable():
                self.typing += ch
            return
        if ch == "q" or ch == "\x03":
            self.quit = True
        elif ch == "/":
            self.typing = ""
        elif ch == "\x1b":
            self.filter = ""
        elif ch in SORT_KEYS:
            if ch == self.sort:
                self.descending = not self.descending
            else:
                self.sort, self.descending = ch, SORT_KEYS[ch][2]


@dataclass
class Snapshot:
    servers: list[dict[str, Any]] = field(default_factory=list)
    read_at: float = 0.0
    seconds: float = 0.0
    error: str | None = None


def read(store: Path, variables: dict[str, Any], lookback_s: float | None) -> Snapshot:
    """Each instance's latest complete window, as /api/signals gives it."""
    from .snapshot import read_snapshot, servers_of

    t0 = time.monotonic()
    rows = read_snapshot(store, variables, lookback_s)
    servers = servers_of(rows)
    for s in servers:
        lat = s.get("latency") or {}
        for k in ("p50_ttft_s", "p99_ttft_s", "p50_e2e_s", "p99_e2e_s"):
            s[k] = lat.get(k)
    return Snapshot(servers, time.time(), time.monotonic() - t0)


def visible(servers: list[dict[str, Any]], view: View) -> list[dict[str, Any]]:
    """The rows the view shows: filtered (instance, engine or model containing the text),
    sorted (instances without the value last, whatever the direction)."""
    text = (view.typing if view.typing is not None else view.filter).lower()
    rows = [s for s in servers if not text or any(text in str(s.get(k) or "").lower() for k in ("server", "engine", "model"))]
    col = SORT_KEYS[view.sort][0]
    have = [s for s in rows if s.get(col) is not None]
    none = [s for s in rows if s.get(col) is None]
    have.sort(key=lambda s: (s[col], s["server"]) if col != "server" else s["server"], reverse=view.descending)
    return have + sorted(none, key=lambda s: s["server"])


def _f(v: Any, fmt: str, none: str = "-") -> str:
    return none if v is None else format(v, fmt)


def _ms(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v * 1000:.0f}ms" if v < 1 else f"{v:.2f}s" if v < 100 else f"{v:.0f}s"


def _age(newest: float | None, now: float) -> str:
    if newest is None:
        return "-"
    a = max(0.0, now - newest)
    return f"{a:.0f}s" if a < 120 else f"{a / 60:.0f}m" if a < 7200 else f"{a / 3600:.0f}h" if a < 172800 else f"{a / 86400:.0f}d"


def frame(store: Path, snap: Snapshot, view: View, width: int, now: float | None = None, color: bool = True) -> str:
    """One screen: a header, the table, the keys. Rendered by rich to text (with colour
    codes when `color`)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from ..termsafe import shown as printable

    now = time.time() if now is None else now
    rows = visible(snap.servers, view)
    sort_col, sort_title, _ = SORT_KEYS[view.sort]
    table = Table(box=None, pad_edge=False, header_style="bold reverse", expand=False)
    heads = [("INSTANCE", "server"), ("ENGINE", None), ("MODEL", None), ("WINDOW", None), ("QUEUE", "waiting"),
             ("RUN", "running"), ("KV", "kv_usage"), ("TOK/S", "tokens_per_second"), ("REQ/S", None),
             ("TTFT p50", None), ("TTFT p99", "p99_ttft_s"), ("E2E p50", None), ("E2E p99", "p99_e2e_s"),
             ("AGE", None), ("SIGNALS", None)]
    for title, col in heads:
        arrow = (" v" if view.descending else " ^") if col == sort_col else ""
        right = title not in ("INSTANCE", "ENGINE", "MODEL", "WINDOW", "SIGNALS")
        table.add_column(title + arrow, justify="right" if right else "left", no_wrap=True,
                         overflow="ellipsis", max_width=40 if title in ("MODEL", "SIGNALS") else None)
    for s in rows:
        window = s.get("window_start")
        sig = ", ".join(f"{x['signal']}{'!' if x['severity'] == 'critical' else ''}" for x in s.get("signals", []))
        style = "red" if s.get("scale_out") else "magenta" if s.get("route_better") else None
        table.add_row(
            # names from logs and file names: a newline or an escape would forge rows (termsafe)
            printable(s["server"]), printable(s.get("engine") or "-"), printable((s.get("model") or "-").split("/")[-1]),
            window[11:16] if window else "-",
            _f(s.get("waiting"), ".1f"), _f(s.get("running"), ".1f"),
            "-" if s.get("kv_usage") is None else f"{100 * s['kv_usage']:.0f}%",
            _f(s.get("tokens_per_second"), ",.0f"), _f(s.get("requests_per_second"), ".2f"),
            _ms(s.get("p50_ttft_s")), _ms(s.get("p99_ttft_s")), _ms(s.get("p50_e2e_s")), _ms(s.get("p99_e2e_s")),
            _age(s.get("newest_ts"), now), sig or "-", style=style,
        )
    out = io.StringIO()
    con = Console(file=out, width=max(40, width), force_terminal=color, color_system="standard" if color else None,
                  highlight=False, legacy_windows=False)
    read = dt.datetime.fromtimestamp(snap.read_at, dt.timezone.utc).strftime("%H:%M:%S") if snap.read_at else "-"
    flt = f"/{view.typing}_" if view.typing is not None else (f"filter {view.filter!r}" if view.filter else "no filter")
    con.print(Text(f"servelens top  {store}  {len(rows)} of {len(snap.servers)} instance(s)  sort: {sort_title} "
                   f"{'v' if view.descending else '^'}  {flt}  read {read} UTC ({snap.seconds:.1f}s)", style="bold"))
    if snap.error:
        con.print(Text(f"error: {snap.error} (the last values stay shown)", style="red"))
    con.print(table)
    if not rows:
        con.print("no instance matches the filter" if snap.servers else "no instance in the store yet")
    con.print(Text(HELP, style="dim"))
    return out.getvalue()


def run(store: Path, variables: dict[str, Any], *, interval_s: float = 1.0, lookback_s: float | None = 900.0,
        initial_sort: str = "w", stdin=None, stdout=None, reader: Callable[..., Snapshot] = read,
        first: tuple[Any, Snapshot] | None = None) -> int:
    """The live loop on a terminal: redraw every `interval_s`, read the store again when it
    has committed, act on keys. Returns the exit code. `first`: the store's key and a snapshot
    already read at it (not read again until the store commits)."""
    import termios
    import tty

    from .snapshot import store_key

    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    fd = stdin.fileno()
    old = termios.tcgetattr(fd)
    view = View(sort=initial_sort, descending=SORT_KEYS[initial_sort][2])
    key, snap = first if first is not None else (None, Snapshot())
    try:
        tty.setcbreak(fd)
        stdout.write(ALT_ON)
        next_draw = 0.0
        while not view.quit:
            now = time.monotonic()
            if now >= next_draw:
                k = store_key(store)
                if k != key:
                    try:
                        snap = reader(store, variables, lookback_s)
                        key = k
                    except Exception as e:  # noqa: BLE001 - a failed read keeps the last values on screen
                        snap.error = " ".join(str(e).split())[:200]
                width = os.get_terminal_size(stdout.fileno()).columns if stdout.isatty() else 160
                stdout.write(CLEAR + frame(store, snap, view, width))
                stdout.flush()
                next_draw = now + interval_s
            ready, _, _ = select.select([fd], [], [], max(0.0, next_draw - time.monotonic()))
            if ready:
                data = os.read(fd, 64).decode("utf-8", errors="ignore")
                for ch in data:
                    view.key(ch)
                    if view.quit:
                        break
                next_draw = 0.0  # show the key's effect at once
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, old)
        stdout.write(ALT_OFF)
        stdout.flush()
    return 0
