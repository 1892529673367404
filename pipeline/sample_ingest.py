"""Samples into the store: which server they are of, and files of scrapes read by `ingest`.

Which instance a scrape belongs to (`name_instances`), so that a store holding a server's log
and its scrapes shows one instance, not two, in this order:

1. `--instance NAME`, for every sample;
2. the instance samples of the same target (host:port) were stored under before;
3. the instance whose log announced the target's port (`Starting vLLM server on
   http://...:8000`, `'port': 8000` in vLLM's args, llama-server's `listening on ...:8080`,
   uvicorn's `running on`, SGLang's `port=30000`);
4. the instance of the same engine whose log names the model the samples label
   (`model_name`, as vLLM, SGLang and TensorRT-LLM label them);
5. the only instance of the same engine in the store;
6. else a name of its own: the target (`127.0.0.1:8000`), or the file's name, and a note
   says so (`--instance` names it).
"""

from __future__ import annotations

import re

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import polars as pl

from .sources import fingerprint as fp
from .sources.exposition import ParseStats, exposition_flags, finish_raw, looks_like_exposition, parse_blocks
from .store.sample_parts import sample_parts
from .store.samples import commit_samples, sample_entries
from .sources.samples import POLARS_SCHEMA
from .store.commit import Store

SNIFF_BYTES = 64 * 1024
BLOCK_BYTES = 16 * 1024 * 1024
# where a log says which port its server listens on; the port is group 1
PORT_RE = r"""(?:https?://[^\s/'"]+:|'port':\s*|\bport=|\bport:\s*|--port[ =])(\d{2,5})\b"""


@dataclass
class SampleResult:
    """What one source of samples brought (a file, a scrape run, a Prometheus range)."""

    source: str
    instances: list[str] = field(default_factory=list)
    samples: int = 0  # read
    new: int = 0  # stored (the rest the store held already)
    series: int = 0
    scrapes: int = 0
    lines: int = 0
    bad_lines: int = 0
    bad_examples: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        what = f"{self.samples:,} samples of {self.series:,} series in {self.scrapes:,} scrape(s), {self.new:,} new"
        where = ", ".join(self.instances) or "-"
        bad = ""
        if self.bad_lines:
            bad = f"; {self.bad_lines:,} line(s) not understood, e.g. {self.bad_examples[0][:120]!r}"
        return f"metrics {self.source}: {what} -> instance {where}{bad}"


def is_exposition(path: Path) -> bool:
    """Does the file hold Prometheus / OpenMetrics text (by content, whatever its name)?"""
    text = _sniff_text(path)
    return text is not None and looks_like_exposition(text)


def _sniff_text(path: Path) -> str | None:
    """The complete lines of the file's first SNIFF_BYTES; None when it cannot be exposition."""
    try:
        with fp.open_stream(path) as f:
            head = f.read(SNIFF_BYTES)
    except (OSError, EOFError):
        return None
    if b"\0" in head[:4096]:
        return None
    text = head.decode("utf-8", errors="replace")
    return text[: text.rfind("\n") + 1] if "\n" in text else text


def _blocks(path: Path) -> Iterator[str]:
    """The file's text in blocks that end at a line end."""
    rest = b""
    with fp.open_stream(path) as f:
        while True:
            data = f.read(BLOCK_BYTES)
            if not data:
                break
            data = rest + data
            cut = data.rfind(b"\n") + 1
            if cut == 0:
                rest = data
                continue
            rest = data[cut:]
            yield data[:cut].decode("utf-8", errors="replace")
    if rest:
        yield rest.decode("utf-8", errors="replace")


# -- which instance -------------------------------------------------------------------------

@dataclass
class Known:
    """What the store tells about its instances, for naming samples."""

    engines: dict[str, str] = field(default_factory=dict)  # instance -> engine (of its log)
    ports: dict[str, set[str]] = field(default_factory=dict)  # instance -> ports its log announced
    models: dict[str, set[str]] = field(default_factory=dict)  # instance -> models its log names
    targets: dict[str, str] = field(default_factory=dict)  # target -> instance samples were stored under


def known_instances(store: Store) -> Known:
    """The store's instances, their engines, the ports and models their logs name, and the
    targets earlier samples were stored under."""
    import duckdb

    from .store.layout import read_parquet_sql
    from .store.manifest import committed_parts

    k = Known()
    parts = [str(p) for p in committed_parts(store.root, store.manifest)]
    if parts:
        con = duckdb.connect()
        try:
            src = read_parquet_sql(parts, True)
            rows = con.execute(f"""
                with ev as ({src}),
                inst as (select instance, any_value(engine) filter (where engine <> 'client') as engine,
                                list(distinct model) filter (where model is not null) as models
                         from ev where instance is not null group by instance),
                ports as (select instance, list(distinct p) as ports
                          from (select instance, unnest(regexp_extract_all(message, ?, 1)) as p
                                from ev where message is not null and event in ('log', 'capacity'))
                          group by instance)
                select inst.instance, inst.engine, inst.models, ports.ports
                from inst left join ports using (instance)
            """, [PORT_RE]).fetchall()
        finally:
            con.close()
        for inst, engine, models, ports in rows:
            if engine is None:
                continue
            k.engines[inst] = engine
            k.models[inst] = set(models or [])
            k.ports[inst] = set(ports or [])
    entry = sample_entries(store.manifest)
    files = [str(p) for p in sample_parts(store.root, store.manifest)]
    if files and entry["parts"]:
        for target, inst in (
            pl.scan_parquet(files).select("target", "instance").filter(pl.col("target").is_not_null())
            .unique().collect().iter_rows()
        ):
            k.targets.setdefault(target, inst)
    return k


def _port(target: str | None) -> str | None:
    if not target or ":" not in target:
        return None
    port = target.rsplit(":", 1)[1].split("/", 1)[0]
    return port if port.isdigit() else None


def name_instances(
    samples: pl.DataFrame,
    known: Known,
    *,
    explicit: str | None = None,
    fallback: str | None = None,
) -> tuple[pl.DataFrame, list[str]]:
    """Give each sample without an instance one (the rules of the module docstring), per
    target. Returns the samples and notes saying how each target was named."""
    if samples.height == 0:
        return samples, []
    if explicit:
        return samples.with_columns(pl.lit(explicit).alias("instance")), []
    notes: list[str] = []
    todo = samples.filter(pl.col("instance").is_null())
    if todo.height == 0:
        return samples, []
    groups = todo.group_by("target").agg(
        pl.col("engine").filter(pl.col("engine") != "unknown").mode().first().alias("engine"),
        pl.col("labels").str.json_path_match("$.model_name").drop_nulls().unique().alias("models"),
    )
    names: dict[str | None, str] = {}
    for target, engine, models in groups.iter_rows():
        same = [i for i, e in known.engines.items() if engine is None or e == engine]
        port = _port(target)
        by_port = [i for i in same if port and port in known.ports.get(i, set())]
        by_model = [i for i in same if set(models or []) & known.models.get(i, set())]
        how = None
        if target in known.targets:
            name, how = known.targets[target], None
        elif len(by_port) == 1:
            name, how = by_port[0], f"its log announced port {port}"
        elif len(by_model) == 1:
            name, how = by_model[0], f"its log names model {sorted(set(models) & known.models[by_model[0]])[0]!r}"
        elif len(same) == 1 and not by_port:
            name, how = same[0], f"the only {engine} instance in the store"
        else:
            name = target or fallback or "metrics"
            why = (f"{len(same)} {engine} instances could be it" if same else f"no {engine or 'engine'} log in the store names it")
            notes.append(f"samples of {target or fallback} stored as instance {name!r} ({why}; --instance names it)")
        if how:
            notes.append(f"samples of {target or fallback} stored under instance {name!r}: {how}")
        names[target] = name
    mapping = pl.DataFrame({"target": list(names.keys()), "_name": list(names.values())},
                           schema={"target": pl.Utf8, "_name": pl.Utf8})
    out = samples.join(mapping, on="target", how="left", nulls_equal=True).with_columns(
        pl.coalesce("instance", "_name").alias("instance")
    ).drop("_name")
    return out, notes


def server_engine(samples: pl.DataFrame) -> pl.DataFrame:
    """Every sample of an instance gets the instance's engine (the one its engine-prefixed
    metrics say; a process or HTTP metric beside them is the same server's), as events carry
    their server's engine."""
    if samples.height == 0:
        return samples
    eng = samples.filter(pl.col("engine") != "unknown").group_by("instance").agg(
        pl.col("engine").mode().first().alias("_engine"))
    return samples.join(eng, on="instance", how="left", nulls_equal=True).with_columns(
        pl.coalesce("_engine", "engine").alias("engine")).drop("_engine")


def store_samples(store: Store, samples: pl.DataFrame, result: SampleResult, *, explicit: str | None,
                  fallback: str | None, known: Known | None = None) -> None:
    """Name, stamp and commit one batch of samples, counting into `result`."""
    if samples.height == 0:
        return
    samples, notes = name_instances(samples, known or known_instances(store), explicit=explicit, fallback=fallback)
    samples = server_engine(samples)
    for n in notes:
        if n not in result.notes:
            result.notes.append(n)
    result.samples += samples.height
    result.new += commit_samples(store, samples)
    result.instances = sorted(set(result.instances) | set(samples["instance"].unique().to_list()))


def ingest_file(store: Store, path: Path, *, instance: str | None, source: str) -> SampleResult:
    """One file of scrapes into the store. Samples without a time of their own or a
    `# scrape at` line take the file's modification time (one scrape)."""
    result = SampleResult(source=source)
    stats = ParseStats()
    mtime = dt.datetime.fromtimestamp(path.stat().st_mtime, dt.timezone.utc)
    frames = list(parse_blocks(_blocks(path), mtime, stats))
    raw = pl.concat(frames) if frames else None
    result.lines, result.bad_lines, result.bad_examples = stats.lines, stats.bad, stats.bad_examples
    if raw is None:
        return result
    samples = finish_raw(raw, stats, instance=None, source=source)
    result.series = samples.select("name", "labels", "le", "quantile", "target").unique().height
    result.scrapes = samples["ts"].n_unique()
    fallback = path.name.split(".")[0] or "metrics"
    store_samples(store, samples, result, explicit=instance, fallback=fallback)
    if stats.timeless:
        result.notes.append(f"{source}: {stats.timeless:,} samples carry no time and no `# scrape at` line "
                            "precedes them: they are placed at the file's modification time")
    return result


def empty() -> pl.DataFrame:
    return pl.DataFrame(schema=POLARS_SCHEMA)


def split_metrics_files(found: list) -> tuple[list, list]:
    """`servelens ingest`'s files -> (logs, files of /metrics scrapes), by content."""
    logs, metrics = [], []
    batch = 256  # files sniffed per polars pass (their samples held meanwhile)
    for start in range(0, len(found), batch):
        group = found[start:start + batch]
        for f, yes in zip(group, exposition_flags([_sniff_text(f.path) for f in group])):
            (metrics if yes else logs).append(f)
    return logs, metrics


def ingest_metrics_files(store: Store, found: list, instance: str | None, summary) -> None:
    """The files of scrapes of one `servelens ingest`, after its logs: each is a summary
    entry (`summary.samples`) and its notes go to the summary's."""
    from .sources.discover import display_path

    for f in found:
        r = ingest_file(store, f.path, instance=instance, source=display_path(f.path))
        summary.samples.append(r)
        summary.notes.append(r.describe())
        summary.notes.extend(r.notes)


# An instance named after its scrape target (`host:port`): what `servelens scrape` stores
# when no log in the store names the server yet
TARGET_NAMED = re.compile(r"^[^\s/:]+:(\d{2,5})$")


def adopt_scraped_instances(store: Store) -> dict[str, str]:
    """After logs are ingested: samples stored under their target's name (scraped before the
    server's log was in the store) take the instance of the one log of the same engine that
    announced that port. Returns the renames made."""
    entry = sample_entries(store.manifest)
    held = {i for v in entry.get("info", {}).values() for i in (v or {}).get("instances") or []}
    orphans = {i: m[1] for i in held if (m := TARGET_NAMED.match(i))}
    if not orphans:
        return {}
    known = known_instances(store)
    files = [str(p) for p in sample_parts(store.root, store.manifest)]
    engines = dict(pl.scan_parquet(files).filter(pl.col("instance").is_in(list(orphans)))
                   .select("instance", "engine").unique(subset="instance").collect().iter_rows())
    names = {}
    for orphan, port in orphans.items():
        logs = [i for i, e in known.engines.items()
                if e == engines.get(orphan) and port in known.ports.get(i, set()) and i != orphan]
        if len(logs) == 1:
            names[orphan] = logs[0]
    if not names:
        return {}
    from .store.sample_compact import rename_instances

    return names if rename_instances(store, names) else {}
