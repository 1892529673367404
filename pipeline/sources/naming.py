"""Instance identity: which server wrote a file, so that two servers are never merged and one
server's rotated and restarted files stay one lineage.

- Kubernetes container logs name their pod:
    /var/log/containers/<pod>_<namespace>_<container>-<container id>.log
    /var/log/pods/<namespace>_<pod>_<pod uid>/<container>/<restart>.log[.<timestamp>[.gz]]
  The instance is the pod (stable across container restarts); namespace, container and
  restart become labels. Two pods of one name in two namespaces become `<namespace>/<pod>`.
- Docker's `/var/lib/docker/containers/<id>/<id>-json.log[.N]`: the container's short id.
- Otherwise the instance is the file's name without rotation suffixes (instance_from_path). When
  that name is shared by files in different directories (`gpu-node-1/vllm.log`,
  `gpu-node-2/vllm.log`), the nearest directory names that tell them apart are put in front
  (`gpu-node-1/vllm`), and the ingest summary says so.
- `--instance-from TEMPLATE` names every file from parts of its path: `{stem}` (the name
  above), `{name}` (the file name), `{parent}`, `{grandparent}`, `{dir}` (the parent's
  path), and for Kubernetes logs `{pod}`, `{namespace}`, `{container}`.
"""

from __future__ import annotations

import functools
import re
import string
from collections import defaultdict
from pathlib import Path

from .discover import ROTATION_SUFFIX

_CONTAINERS = re.compile(
    r"^(?P<pod>[a-z0-9][a-z0-9.-]*)_(?P<namespace>[a-z0-9][a-z0-9-]*)_(?P<container>[a-z0-9][a-z0-9-]*)-(?P<id>[0-9a-f]{64})\.log$"
)
_POD_DIR = re.compile(r"^(?P<namespace>[a-z0-9][a-z0-9-]*)_(?P<pod>[a-z0-9][a-z0-9.-]*)_(?P<uid>[0-9a-f-]{36})$")
_DOCKER = re.compile(r"^(?P<id>[0-9a-f]{64})-json\.log(?:\.[0-9]+)?(?:\.gz)?$")
_RESTART = re.compile(r"^(?P<restart>[0-9]+)\.log(?:\.(?P<rotated>[0-9]{8}-[0-9]{6}(?:\.gz)?|gz))?$")
FIELDS = ("stem", "name", "parent", "grandparent", "dir", "pod", "namespace", "container")

LOG_EXT = re.compile(r"\.(log|txt|out|err|jsonl|json|stdout|stderr)$", re.IGNORECASE)
# Stems that name no instance, so the directory does
GENERIC_STEMS = {"log", "logs", "stdout", "stderr", "output", "server", "current", "console", "container"}


class NamingError(Exception):
    pass


def kube_identity(path: Path) -> dict[str, str] | None:
    """The Kubernetes labels of a container log path (pod, namespace, container, and
    restart / container_id / pod_uid where the path says), or None."""
    m = _DOCKER.match(path.name)
    if m:  # /var/lib/docker/containers/<id>/<id>-json.log: the container is the server
        return {"container_id": m["id"][:12]}
    m = _CONTAINERS.match(path.name)
    if m:
        return {"pod": m["pod"], "namespace": m["namespace"], "container": m["container"], "container_id": m["id"][:12]}
    m = _RESTART.match(path.name)
    if m and len(path.parts) >= 3:
        d = _POD_DIR.match(path.parent.parent.name)
        if d:
            return {
                "pod": d["pod"], "namespace": d["namespace"], "container": path.parent.name,
                "restart": m["restart"], "pod_uid": d["uid"],
            }
    return None


def identity_name(labels: dict[str, str]) -> str:
    """The instance a container log's labels name: its pod, else its container."""
    return labels.get("pod") or labels["container_id"]


def base_name(path: Path) -> str:
    return instance_from_path(path)


def lineage_order(path: Path, instance: str) -> tuple:
    """Sort key reading each instance's files oldest first: `x.log.3.gz`, `x.log.2`,
    `x.log.1`, then `x.log`; dated copies by date before the live file; Kubernetes restarts
    by number, each restart's rotated copies before it."""
    name = path.name
    kube = kube_identity(path)
    if kube and "restart" in kube:
        m = _RESTART.match(name)
        return (instance, str(path.parent), int(kube["restart"]), 0 if m["rotated"] else 1, m["rotated"] or "")
    m = re.search(r"\.([0-9]+)(?:\.gz)?$", name)
    if m:
        return (instance, str(path.parent), 0, -int(m[1]), name)
    m = re.search(r"[-_.]([0-9]{4}-?[0-9]{2}-?[0-9]{2}(?:[-_T][0-9:.-]+)?)(?:\.gz)?$", name)
    if m:
        return (instance, str(path.parent), 0, 0, m[1].replace("-", ""))
    return (instance, str(path.parent), 1, 0, name)


class InstanceNamer:
    """Names the instance of each of a set of files (see the module docstring)."""

    def __init__(self, paths: list[Path], template: str | None = None, stored: list[tuple[Path, str]] | None = None):
        """`stored`: (source, instance) of the files the store holds already; a new file
        whose name an instance of another directory holds is told apart from it."""
        self.template = template
        self.notes: list[str] = []
        if template is not None:
            _check_template(template)
        self._names: dict[Path, str] = {}
        self._labels: dict[Path, dict[str, str]] = {}
        # many files share a directory: each resolved once (a realpath is a few lstat calls)
        self._resolve = functools.lru_cache(maxsize=None)(_resolved)
        groups: dict[str, list[Path]] = defaultdict(list)
        for p in paths:
            kube = kube_identity(p)
            if kube:
                self._labels[p] = kube
            groups[self._default(p)].append(p)
        taken: dict[str, set[Path]] = defaultdict(set)
        # the name the store gave a directory's files of one name: its new files keep it
        # (a tailer that sees one of two directories later still continues each lineage)
        kept: dict[tuple[Path, str], str] = {}
        for source, inst in stored or ():
            where = self._resolve(self._lineage_dir(source))
            taken[inst].add(where)
            default = self._default(source)
            if inst == default or inst.endswith("/" + default):
                kept.setdefault((where, default), inst)
        for name, members in groups.items():
            for p, distinct in self._distinct(name, members, taken.get(name, set())).items():
                self._names[p] = kept.get((self._resolve(self._lineage_dir(p)), name), distinct)
        if template is not None:
            self._names = {p: self._render(p) for p in paths}

    def name(self, path: Path) -> str:
        return self._names.get(path) or self._default(path)

    def labels(self, path: Path) -> dict[str, str]:
        return self._labels.get(path) or {}

    def _default(self, path: Path) -> str:
        kube = kube_identity(path)
        return identity_name(kube) if kube else base_name(path)

    def _lineage_dir(self, path: Path) -> Path:
        """The directory that holds one server's files: for a pod's logs the pod's
        directory, else the file's own."""
        kube = kube_identity(path)
        if kube and "restart" in kube:
            return path.parent.parent
        return path.parent

    def _distinct(self, name: str, members: list[Path], stored_dirs: set[Path] = frozenset()) -> dict[Path, str]:
        """Names for the files `members` that share the name `name`: one per lineage
        directory. Directories the store already holds under `name` keep it."""
        dir_of = {p: self._resolve(self._lineage_dir(p)) for p in members}
        dirs = sorted(set(dir_of.values()) | set(stored_dirs))
        if len(dirs) < 2:
            return {p: name for p in members}
        kube = {p: kube_identity(p) for p in members}
        if all(k and "namespace" in k for k in kube.values()):
            namespaces = {k["namespace"] for k in kube.values()}
            if len(namespaces) == len({(k["namespace"], k["pod"]) for k in kube.values()}):
                # one pod of this name per namespace: its restarts and rotations are one lineage
                out = {p: f"{kube[p]['namespace']}/{name}" if len(namespaces) > 1 else name for p in members}
                if len(namespaces) > 1:
                    self.notes.append(f"instance {name!r} is a pod in {len(namespaces)} namespaces: named " + ", ".join(sorted(set(out.values()))))
                return out
        # the fewest trailing directory names that tell the directories apart
        depth = 1
        while depth < 16:
            tags = {d: "/".join(d.parts[-depth:]) if d.parts else "." for d in dirs}
            if len(set(tags.values())) == len(dirs):
                break
            depth += 1
        out = {p: name if dir_of[p] in stored_dirs else f"{tags[dir_of[p]]}/{name}" for p in members}
        renamed = sorted({v for v in out.values() if v != name})
        if stored_dirs - set(dir_of.values()):
            self.notes.append(
                f"the store already has instance {name!r} from another directory "
                f"({', '.join(sorted(str(d) for d in stored_dirs - set(dir_of.values())))}): the new files are named "
                + ", ".join(renamed) + " (use --instance or --instance-from to name them otherwise)"
            )
        else:
            self.notes.append(
                f"files named {name!r} in {len(dirs)} directories are different instances: "
                + ", ".join(sorted(set(out.values())))
                + " (use --instance or --instance-from to name them otherwise)"
            )
        return out

    def _render(self, path: Path) -> str:
        kube = kube_identity(path) or {}
        parts = {
            "stem": self._default(path) if not kube else base_name(path),
            "name": path.name,
            "parent": path.parent.name,
            "grandparent": path.parent.parent.name,
            "dir": str(path.parent),
            "pod": kube.get("pod", ""),
            "namespace": kube.get("namespace", ""),
            "container": kube.get("container", ""),
        }
        out = self.template.format(**parts).strip("/")
        return out or parts["stem"]


def _resolved(p: Path) -> Path:
    try:
        return p.resolve()
    except OSError:
        return p


def _check_template(template: str) -> None:
    try:
        names = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as e:
        raise NamingError(f"--instance-from {template!r} is not a valid template ({e}); use e.g. '{{parent}}/{{stem}}'") from None
    bad = [n for n in names if n not in FIELDS]
    if bad or not names:
        what = f"unknown field {{{bad[0]}}}" if bad else "no field"
        raise NamingError(
            f"--instance-from {template!r} has {what}; use some of "
            + ", ".join("{" + f + "}" for f in FIELDS)
        )


def instance_from_path(path: Path) -> str:
    """`logs/vllm-a.log.1.gz` -> `vllm-a`; a Kubernetes container log -> its pod
    (`pods/ns_web-0_<uid>/vllm/0.log` -> `web-0`)."""
    kube = kube_identity(path)
    if kube:
        return identity_name(kube)
    name = path.name
    while True:
        new = ROTATION_SUFFIX.sub("", name)
        new = LOG_EXT.sub("", new)
        if new == name:
            break
        name = new
    if not name or name.isdigit() or name.lower() in GENERIC_STEMS:
        return _instance_from_directory(path.parent) or name or "default"
    return name


def _instance_from_directory(directory: Path) -> str | None:
    """The nearest directory name that is not generic (`vllm-a/logs/server.log` -> `vllm-a`).
    Taken as it is: a directory is not rotated, so `real-0.32/` stays `real-0.32`."""
    for d in (directory, *directory.parents):
        if d.name and not d.name.isdigit() and d.name.lower() not in GENERIC_STEMS:
            return d.name
    return None


def directory_instance(source: str) -> str | None:
    """The instance a file's directory names (`sglang-a/metrics.log` -> `sglang-a`), for the
    parsers of files an engine's exporter names after itself."""
    parent = Path(source).parent
    return instance_from_path(parent) if parent.name else None
