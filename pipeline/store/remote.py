"""Stores on object storage (`--store s3://bucket/prefix`, `gs://...`, `file:///...`) and
fleets of stores read as one (`--store 's3://bucket/fleet/*'`, a local glob, or a fleet list
file naming one store per line).

Writing (ingest, tail, compact) goes through a local mirror of the remote store
($SERVELENS_CACHE_DIR/stores/<scheme>/<bucket>/<prefix>): the store's ordinary commit protocol
(pipeline/store/commit.py, with its lock, offsets and roll-forward) runs there, and after every commit
`Mirror.push` publishes it. Object storage has no rename, so the manifest is the commit point
and is written last:

1. the commit's new parts are uploaded under `<prefix>/_staging/` (a glob over `events/`
   never sees them);
2. `<prefix>/manifest.json` is written in one PUT (S3 replaces an object whole, so a reader
   sees the old manifest or the new one) listing the new parts and, as `pending`, where they
   still are: the commit;
3. the parts are moved (server-side copy) to their `events/` keys, parts the manifest no
   longer lists (compaction's) are deleted at once, then the manifest is written again
   without `pending`.

A crash before 2 leaves only `_staging/` objects (deleted by the next open) and the local
mirror re-publishes the commit; after 2 the next open finishes the moves. The offsets that
make re-ingesting add nothing are in the remote manifest too: a node that lost its mirror
starts a new one from the remote manifest, so nothing is doubled.

One writer per store: each node writes its own prefix (`s3://bucket/fleet/<node>`), without
coordination; the mirror's lock stops a second writer on the same machine, nothing stops one
on another machine (object storage has no lock: give each node its own prefix).

Reading (`servelens sql`, report, dashboard) needs no mirror: the remote manifest gives the
parts, read through a pyarrow dataset registered into the sandboxed DuckDB connection
(DuckDB's own S3 support, httpfs, is an extension the duckdb wheel does not carry, and nothing
may be downloaded at run time). Credentials and endpoint come from the usual AWS variables
(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION, AWS_ENDPOINT_URL).
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where a remote store is opened: a local store's query needs no pyarrow
    import pyarrow.fs as pafs

from .layout import PARTITION_KEYS

REMOTE_SCHEMES = ("s3", "gs", "gcs", "hdfs")
_URL = re.compile(r"^([a-z][a-z0-9+.-]*):/+(.*)$", re.I)
STAGING = "_staging"


def store_url(store: Path | str) -> str | None:
    """The remote URL a --store names (`s3://bucket/prefix`), or None for a local store. A
    URL that went through pathlib (`s3:/bucket/prefix`) is recognised too."""
    m = _URL.match(str(store))
    if not m or m.group(1).lower() not in REMOTE_SCHEMES:
        return None
    return f"{m.group(1).lower()}://{m.group(2).rstrip('/')}"


def local_store(store: Path | str) -> Path:
    """A local --store as a path (`file:///x` is `/x`)."""
    m = _URL.match(str(store))
    if m and m.group(1).lower() == "file":
        return Path("/" + m.group(2))
    return Path(store)


def is_fleet(store: Path | str) -> bool:
    """A --store naming several stores: a glob, or a fleet list file."""
    text = str(store)
    if any(c in text for c in "*?["):
        return True
    return store_url(store) is None and local_store(store).is_file()


def filesystem(url: str) -> tuple[pafs.FileSystem, str]:
    import pyarrow as pa
    import pyarrow.fs as pafs

    try:
        return pafs.FileSystem.from_uri(url)
    except (pa.ArrowInvalid, OSError, ValueError) as e:
        from .manifest import StoreError

        raise StoreError(f"cannot open store {url}: {' '.join(str(e).split())}") from None


def _read_json(fs: pafs.FileSystem, path: str) -> dict | None:
    try:
        with fs.open_input_stream(path) as f:
            return json.loads(f.read())
    except FileNotFoundError:
        return None
    except OSError as e:
        if "NoSuchKey" in str(e) or "not found" in str(e).lower():
            return None
        raise


def _write_json(fs: pafs.FileSystem, path: str, data: dict) -> None:
    body = json.dumps(data, indent=1, sort_keys=True, default=str).encode()
    with fs.open_output_stream(path) as f:  # one PUT: the object is replaced whole
        f.write(body)


def read_remote_manifest(url: str) -> dict | None:
    fs, base = filesystem(url)
    return _read_json(fs, f"{base}/manifest.json")


def store_exists(store: Path | str) -> bool:
    url = store_url(store)
    if url is None:
        return (local_store(store) / "manifest.json").exists()
    return read_remote_manifest(url) is not None


def cache_dir() -> Path:
    return Path(os.environ.get("SERVELENS_CACHE_DIR") or Path.home() / ".cache" / "servelens")


def mirror_dir(url: str) -> Path:
    scheme, rest = url.split("://", 1)
    return cache_dir() / "stores" / scheme / rest


# --- writing ------------------------------------------------------------------------------------


@dataclass
class Mirror:
    """Publishes the commits of a local mirror to its remote store (see the module's
    docstring for the protocol)."""

    url: str
    local: Path
    fs: pafs.FileSystem
    base: str
    published: set[str] = field(default_factory=set)  # parts under the remote events/
    unpublished: str | None = None  # why the last push failed (retried at the next commit)

    @classmethod
    def attach(cls, url: str) -> "Mirror":
        fs, base = filesystem(url)
        mirror = cls(url, mirror_dir(url), fs, base)
        mirror.published = mirror._listed("events")
        return mirror

    def _listed(self, top: str) -> set[str]:
        import pyarrow.fs as pafs

        sel = pafs.FileSelector(f"{self.base}/{top}", recursive=True, allow_not_found=True)
        n = len(self.base) + 1
        return {i.path[n:] for i in self.fs.get_file_info(sel) if i.type == pafs.FileType.File}

    def seed(self) -> None:
        """Before the local store opens: a mirror without a manifest (a new machine, a lost
        cache) starts from the remote one, so its offsets hold and nothing is read twice."""
        remote = _read_json(self.fs, f"{self.base}/manifest.json")
        local = self.local / "manifest.json"
        if remote is None:
            return
        mine = None
        if local.exists():
            try:
                mine = json.loads(local.read_text())
            except ValueError:
                mine = None
        if mine is None or str(remote.get("committed_at") or "") > str(mine.get("committed_at") or ""):
            from .manifest import write_json_atomic

            self.local.mkdir(parents=True, exist_ok=True)
            # the parts stay remote: compaction merges only parts it has locally
            write_json_atomic(local, {**remote, "pending": []})

    def push(self, manifest: dict) -> None:
        """Publish the local manifest and the parts it lists that the remote store lacks."""
        from .manifest import part_location

        new = [rel for rel in manifest["parts"] if rel not in self.published]
        staged = []
        for rel in new:
            path = part_location(self.local, manifest, rel)
            if path is None:  # only remote (a mirror seeded from it): nothing to upload
                continue
            key = f"{STAGING}/{rel}"
            with open(path, "rb") as src, self.fs.open_output_stream(f"{self.base}/{key}") as dst:
                while chunk := src.read(8 << 20):
                    dst.write(chunk)
            staged.append([key, rel])
        doc = {**manifest, "pending": staged}
        _write_json(self.fs, f"{self.base}/manifest.json", doc)  # the commit
        self.finish(doc)

    def finish(self, doc: dict) -> None:
        # parts retired by compaction leave events/ first, then their replacement moves in:
        # a glob over events/ may briefly miss those rows, never count them twice
        keep = set(doc["parts"])
        for rel in sorted(self.published - keep):
            try:
                self.fs.delete_file(f"{self.base}/{rel}")
            except FileNotFoundError:
                pass
            self.published.discard(rel)
        for key, rel in doc.get("pending", []):
            try:
                self.fs.move(f"{self.base}/{key}", f"{self.base}/{rel}")
            except FileNotFoundError:
                pass  # moved already (a roll-forward after a crash between the moves)
            self.published.add(rel)
        if doc.get("pending"):
            _write_json(self.fs, f"{self.base}/manifest.json", {**doc, "pending": []})

    def recover(self) -> None:
        """At open: finish a remote commit whose moves were cut short; drop staged uploads
        no manifest committed."""
        doc = _read_json(self.fs, f"{self.base}/manifest.json")
        if doc and doc.get("pending"):
            self.finish(doc)
        for key in self._listed(STAGING):
            self.fs.delete_file(f"{self.base}/{STAGING}/{key}")


def open_store(store_cls: Any, url: str, purpose: str) -> Any:
    """Store.open for a remote URL: the local mirror, opened (and locked) as a store, with
    its commits published to `url`."""
    from .manifest import StoreError

    try:
        mirror = Mirror.attach(url)
        mirror.recover()
        mirror.seed()
    except OSError as e:
        raise StoreError(f"cannot open store {url}: {' '.join(str(e).split())[:300]}") from None
    store = store_cls.open(mirror.local, purpose=purpose)
    try:
        store.remote = mirror
        mirror.push(store.manifest)  # a commit the mirror made but did not publish
    except OSError as e:
        store.close()
        raise StoreError(f"cannot publish to store {url}: {' '.join(str(e).split())[:300]}") from None
    except BaseException:
        store.close()
        raise
    return store


# --- reading ------------------------------------------------------------------------------------


def expand(store: Path | str) -> list[str]:
    """The stores a --store names: itself, the stores a glob matches (those holding a
    manifest.json), or those a fleet list file names (one a line, `#` comments)."""
    text = str(store)
    url = store_url(store)
    if url is None and not any(c in text for c in "*?[") and local_store(store).is_file():
        lines = local_store(store).read_text().splitlines()
        return [s for line in lines if (s := line.split("#", 1)[0].strip())]
    if not any(c in text for c in "*?["):
        return [url or str(local_store(store))]
    if url is None:
        import glob

        return sorted(p for p in glob.glob(str(local_store(store))) if (Path(p) / "manifest.json").exists())
    import pyarrow.fs as pafs

    fs, pattern = filesystem(url.split("*")[0].rsplit("/", 1)[0] or url)
    scheme, rest = url.split("://", 1)
    parent = pattern
    found = []
    for info in fs.get_file_info(pafs.FileSelector(parent, recursive=False, allow_not_found=True)):
        name = info.path[len(parent) + 1:]
        if info.type == pafs.FileType.Directory and fnmatch.fnmatch(f"{parent}/{name}", rest):
            if _read_json(fs, f"{info.path}/manifest.json") is not None:
                found.append(f"{scheme}://{info.path}")
    return sorted(found)


def remote_part_paths(url: str) -> tuple[pafs.FileSystem, list[str]]:
    """The committed parts of a remote store, each where it is now."""
    import pyarrow.fs as pafs

    from .manifest import StoreError, manifest_shape_problem

    fs, base = filesystem(url)
    doc = _read_json(fs, f"{base}/manifest.json")
    if doc is None:
        raise StoreError(f"store {url} does not exist (no manifest.json there); ingest logs first (servelens ingest PATH --store {url})")
    problem = manifest_shape_problem(doc)
    if problem:
        raise StoreError(f"{url}/manifest.json is malformed ({problem})")
    staged = {rel: key for key, rel in doc.get("pending", [])}
    paths = []
    for rel in doc["parts"]:
        key = rel
        if rel in staged and fs.get_file_info(f"{base}/{rel}").type != pafs.FileType.File:
            key = staged[rel]
        paths.append(f"{base}/{key}")
    return fs, paths


def dataset(urls: list[str]) -> Any:
    """One pyarrow dataset over the committed parts of these remote stores (partition values
    from the paths)."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    from .layout import FILE_SCHEMA

    part_schema = pa.schema([(k, pa.string()) for k in PARTITION_KEYS])
    schema = pa.schema([*FILE_SCHEMA, *part_schema])
    children = []
    for url in urls:
        fs, paths = remote_part_paths(url)
        if paths:
            children.append(ds.dataset(paths, schema=schema, filesystem=fs, format="parquet",
                                       partitioning=ds.partitioning(part_schema, flavor="hive"),
                                       partition_base_dir=filesystem(url)[1]))
    if not children:
        return None
    return children[0] if len(children) == 1 else ds.dataset(children)
