"""The store the dashboard tests read: the incident sample (`sample_logs/incident/`, three
engines, two instances each; instance a of each dies of CUDA out-of-memory) ingested once."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
INCIDENT = REPO / "sample_logs" / "incident"


def build_store(tmp: Path, paths: list[Path] | None = None, *, rollups: bool = True) -> Path:
    """Ingest `paths` (default: the whole incident sample) into `tmp/store`; `rollups=False`
    for a test about something else than the views (its queries then derive them from the
    events, as on a store whose rollups are out of date)."""
    from servelens.pipeline.ingest import ingest

    store = tmp / "store"
    ingest(paths or [INCIDENT], store, rollups=rollups)
    return store


def chart_specs(node) -> list[str]:
    """The Vega-Lite specs (JSON text) of the charts under an AppTest node (`at.main`, a tab)."""
    out, todo = [], [node]
    while todo:
        node = todo.pop()
        todo.extend(getattr(node, "children", {}).values())
        if getattr(node, "type", None) == "vega_lite_chart":
            out.append(node.proto.spec)
    return out
