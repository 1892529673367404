"""Line assembly shared by the writers: a writer hands over (time, order, text) rows, built
column-wise with polars for the per-request bulk and from Python for the rare lines; this
module sorts them by time and renders the file in one go."""

from __future__ import annotations

import datetime as dt

import polars as pl

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def ts_expr(ns: pl.Expr) -> pl.Expr:
    """Int64 epoch nanoseconds -> Datetime(ns, UTC)."""
    return pl.from_epoch(ns, time_unit="ns").dt.replace_time_zone("UTC")


def py_dt(ns: int) -> dt.datetime:
    return EPOCH + dt.timedelta(microseconds=ns // 1000)


class Lines:
    """Collects rows; `seq` breaks ties between lines written at the same nanosecond
    (lower first), then insertion order."""

    def __init__(self) -> None:
        self.frames: list[pl.DataFrame] = []
        self.ts: list[int] = []
        self.seq: list[int] = []
        self.text: list[str] = []

    def add(self, ts_ns: int, text: str, seq: int = 0) -> None:
        self.ts.append(int(ts_ns))
        self.seq.append(seq)
        self.text.append(text)

    def add_many(self, ts_ns: int, texts: list[str], seq: int = 0) -> None:
        for t in texts:
            self.add(ts_ns, t, seq)

    def add_frame(self, ts_ns: pl.Expr | pl.Series, text: pl.Series, seq: int = 0) -> None:
        self.frames.append(
            pl.DataFrame({"ts": ts_ns, "text": text}).select(
                pl.col("ts").cast(pl.Int64), pl.lit(seq, pl.Int32).alias("seq"), pl.col("text")
            )
        )

    def frame(self) -> pl.DataFrame:
        rows = pl.DataFrame(
            {"ts": self.ts, "seq": self.seq, "text": self.text},
            schema={"ts": pl.Int64, "seq": pl.Int32, "text": pl.String},
        )
        df = pl.concat([rows, *self.frames]).with_row_index("_i")
        return df.sort(["ts", "seq", "_i"]).drop("_i")

    def render(self, docker_timestamps: bool = False) -> str:
        df = self.frame()
        text = pl.col("text")
        if docker_timestamps:
            # `docker logs --timestamps`: RFC 3339 with nanoseconds, the time the line was written
            stamp = ts_expr(pl.col("ts")).dt.strftime("%Y-%m-%dT%H:%M:%S%.9fZ")
            text = pl.concat_str([stamp, pl.lit(" "), text])
        out = df.select(text.str.join("\n")).item()
        return out + "\n" if out else ""


def rust_duration(ns: pl.Expr) -> pl.Expr:
    """Rust `{:?}` of a `std::time::Duration` from integer nanoseconds: the largest unit of
    s/ms/µs/ns with an integer part >= 1, the rest as a fraction without trailing zeros."""

    def unit(div: int, width: int, suffix: str) -> pl.Expr:
        whole = (ns // div).cast(pl.String)
        frac = (ns % div).cast(pl.String).str.zfill(width).str.strip_chars_end("0")
        return pl.concat_str(
            [whole, pl.when(frac != "").then(pl.lit(".") + frac).otherwise(pl.lit("")), pl.lit(suffix)]
        )

    return (
        pl.when(ns >= 1_000_000_000).then(unit(1_000_000_000, 9, "s"))
        .when(ns >= 1_000_000).then(unit(1_000_000, 6, "ms"))
        .when(ns >= 1_000).then(unit(1_000, 3, "µs"))
        .otherwise(pl.concat_str([ns.cast(pl.String), pl.lit("ns")]))
    )


def rust_duration_py(ns: int) -> str:
    for div, width, suffix in ((10**9, 9, "s"), (10**6, 6, "ms"), (10**3, 3, "µs")):
        if ns >= div:
            frac = str(ns % div).zfill(width).rstrip("0")
            return f"{ns // div}{'.' + frac if frac else ''}{suffix}"
    return f"{ns}ns"
