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


_scanned: list | None = None


def components_scanned_once():
    """A fixture's body: while it runs, Streamlit's scan of every installed distribution's
    metadata for custom components is done once per test process. Each new AppTest scans
    them all again (a running server scans once, at its start); the installed packages do not
    change during a test run, so every AppTest registers the same components as before."""
    global _scanned
    import pytest

    try:
        from streamlit.components.v2 import manifest_scanner
    except ImportError:  # a Streamlit without custom components v2: nothing to scan
        yield
        return
    if _scanned is None:
        _scanned = manifest_scanner.scan_component_manifests()
    scanned = _scanned
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(manifest_scanner, "scan_component_manifests", lambda max_workers=None: list(scanned))
        yield
