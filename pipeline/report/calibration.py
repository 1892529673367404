"""The calibration section of `servelens report`: every autoscaler preset replayed over the
store, and what it would have done.

For each preset (sql/preset-*.toml) the `calibration` view (sql/signals/calibration.sql) says per
instance when the preset's rule would first have asked to scale out, how long before the
instance's first crash or out-of-memory error, and how often it would have flapped over the
store's range. The report calls `build` once (the presets only change the `autoscaler_*`
variables, so the views are re-evaluated on the report's own connection), and its renderers
`to_markdown` / `to_html` at the section's place, last (see report/build.py).
"""

from __future__ import annotations

import datetime as dt
import html
from typing import Any

import duckdb

from .mdsafe import md_text
from ..query.views import preset_path, presets, read_thresholds, set_variables

PREFIX = "autoscaler_"


def build(con: duckdb.DuckDBPyConnection, instance: str | None = None) -> list[dict[str, Any]]:
    """One row per (preset, instance) of the `calibration` view, presets in name order."""
    defaults = {k: v for k, v in read_thresholds().items() if k.startswith(PREFIX)}
    saved = {}
    for key, default in defaults.items():
        value = con.execute(f"select getvariable('{key}')").fetchone()[0]  # key: a known TOML name
        saved[key] = default if value is None else value
    out: list[dict[str, Any]] = []
    try:
        for name in presets():
            rule = {k: v for k, v in read_thresholds(preset_path(name)).items() if k.startswith(PREFIX)}
            set_variables(con, {**defaults, **rule})
            sql = "select * from calibration" + (" where instance = ?" if instance is not None else "")
            rel = con.execute(sql + " order by instance, engine", [instance] if instance is not None else [])
            cols = [d[0] for d in rel.description]
            out += [dict(zip(cols, r)) for r in rel.fetchall()]
    finally:
        set_variables(con, saved)
    return out


def _hm(t: dt.datetime | None) -> str:
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S") if t else "-"


def _lead(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def sentences(rows: list[dict[str, Any]]) -> list[str]:
    """The headline per instance that crashed: which preset would have fired, how early."""
    out = []
    for r in rows:
        if r["first_severe_ts"] is None:
            continue
        if r["lead_s"] is not None:
            out.append(f"With preset {r['preset']}, scale-out of {r['instance']} would have fired at "
                       f"{_hm(r['warned_scale_out_ts'])}, {_lead(r['lead_s'])} before the first "
                       f"{r['first_severe_kind']} ({_hm(r['first_severe_ts'])}).")
        else:
            out.append(f"With preset {r['preset']}, no scale-out of {r['instance']} before its first "
                       f"{r['first_severe_kind']} ({_hm(r['first_severe_ts'])}).")
    return out


HEAD = ["preset", "instance", "first scale-out (UTC)", "first crash/OOM (UTC)", "lead", "scale-outs", "flaps", "time asking (s)"]


def _cells(r: dict[str, Any]) -> list[str]:
    return [r["preset"], r["instance"], _hm(r["first_scale_out_ts"]),
            f"{_hm(r['first_severe_ts'])} {r['first_severe_kind'] or ''}".strip(), _lead(r["lead_s"]),
            str(r["n_scale_outs"]), str(r["n_flaps"]), f"{r['scale_out_s']:g}"]


INTRO = ("Each autoscaler preset (`--thresholds preset:NAME`, see docs/prometheus.md) replayed over "
         "the store's range: when its rule would first have asked to scale out, how long before the "
         "first crash or out-of-memory error, and how often it would have flapped (scaled out again "
         "within its cooldown).")


def to_markdown(rows: list[dict[str, Any]] | None) -> list[str]:
    """The `## Autoscaler calibration` section's lines (none without rows)."""
    if not rows:
        return []
    out = ["## Autoscaler calibration", "", INTRO, ""]
    out += [f"- {md_text(s)}" for s in sentences(rows)]
    out += ["", "| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    out += ["| " + " | ".join(md_text(c) for c in _cells(r)) + " |" for r in rows]
    return out + [""]


def to_html(rows: list[dict[str, Any]] | None) -> str:
    """The same section in HTML ("" without rows)."""
    if not rows:
        return ""
    e = html.escape
    th = "".join(f"<th>{e(h)}</th>" for h in HEAD)
    trs = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in _cells(r)) + "</tr>" for r in rows)
    items = "".join(f"<li>{e(s)}</li>" for s in sentences(rows))
    return (f"<h2>Autoscaler calibration</h2><p>{e(INTRO)}</p><ul>{items}</ul>"
            f"<table><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>")
