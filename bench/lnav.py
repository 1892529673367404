"""A person's first question about an incident log, asked with lnav and with servelens.

The question: per minute, the peak waiting queue and KV-cache usage of a vLLM V1 server. lnav
answers it with a 10-line format file (bench/lnav/vllm_log.json: vLLM's header regex) and one
SQL query over the raw text; servelens ingests the log into a new store and answers with one
`servelens sql`. Both are run as whole processes and charged their CPU seconds (user +
system, wait4 rusage); the answers must agree row for row, so the comparison is of the same
work. lnav is Debian's package: installed here when missing and this runs as root with
apt-get, else the comparison is skipped with a line saying why.

    .venv/bin/python bench/lnav.py                  # the 2-hour log (~105 MB), 3 runs
    .venv/bin/python bench/lnav.py --duration 10m   # a quick look
    .venv/bin/python bench/lnav.py --baseline main  # also servelens as of another commit, same runs

With --baseline, that commit's servelens (its tree from `git archive`, run by this interpreter)
takes its turn in every run beside lnav and the current one, so a change is measured against
the same machine state. Both trees' modules are compiled to bytecode first (as an installed
package's are), so neither pays for compiling them at every start.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from measure import median, run_cmd  # noqa: E402

LNAV_SQL = (";SELECT strftime('%H:%M', log_time) AS minute,"
            " max(CAST(regexp_match('Waiting: (\\d+) reqs', log_body) AS INTEGER)) AS peak_waiting,"
            " max(CAST(regexp_match('GPU KV cache usage: ([\\d.]+)%', log_body) AS REAL)) AS peak_kv_pct"
            " FROM vllm_log WHERE log_body LIKE '%Waiting: %' GROUP BY minute ORDER BY minute")
SERVELENS_SQL = ("select strftime(time_bucket(interval 1 minute, ts), '%H:%M') as minute, max(waiting) as peak_waiting,"
                 " round(max(kv_usage) * 100, 1) as peak_kv_pct from engine_stats group by all order by 1")


def log(msg: str) -> None:
    print(f"[lnav {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def servelens_bin() -> str:
    exe = Path(sys.executable).parent / "servelens"
    return str(exe) if exe.exists() else "servelens"


def servelens_cmd(pkg: Path | None) -> tuple[list[str], dict]:
    """The command running servelens, and its environment: the installed one (pkg None),
    or the tree under `pkg` (its servelens/ package folders) with this interpreter."""
    if pkg is None:
        return [servelens_bin()], dict(os.environ)
    code = "from servelens.pipeline.cli.app import main; main()"
    return [sys.executable, "-c", code], {**os.environ, "PYTHONPATH": str(pkg)}


# the package folders of a checkout and their names under servelens/ (pyproject.toml)
PACKAGE_DIRS = ("parsers", "pipeline", "dashboards", "sql")


def baseline_tree(rev: str, work: Path) -> Path:
    """servelens as of `rev` (git archive of this repository), laid out as an importable
    `servelens` package under the returned folder, its modules compiled."""
    tree, pkg = work / "baseline-src", work / "baseline-pkg"
    tree.mkdir()
    archive = subprocess.run(["git", "-C", str(HERE.parent), "archive", rev], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    (pkg / "servelens").mkdir(parents=True)
    for d in PACKAGE_DIRS:
        (pkg / "servelens" / d).symlink_to(tree / d)
        compileall.compile_dir(str(tree / d), quiet=1)
    return pkg


def ensure_lnav() -> str | None:
    """lnav's path, installing Debian's package when possible; None with the reason logged."""
    if exe := shutil.which("lnav"):
        return exe
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        log("skipped: lnav is not installed and this is not root with apt-get (apt-get install lnav)")
        return None
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    r = subprocess.run(["apt-get", "install", "-y", "lnav"], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        subprocess.run(["apt-get", "update"], capture_output=True, env=env)
        r = subprocess.run(["apt-get", "install", "-y", "lnav"], capture_output=True, text=True, env=env)
    if r.returncode != 0 or not shutil.which("lnav"):
        log(f"skipped: apt-get install lnav failed: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
        return None
    return shutil.which("lnav")


def rows_of(text: str, sep: str | None) -> list[tuple[str, int, float]]:
    """(minute, peak waiting, peak KV %) from lnav's aligned table or servelens's CSV."""
    out = []
    for line in text.strip().splitlines()[1:]:
        minute, waiting, kv = (line.split(sep) if sep else line.split())[:3]
        out.append((minute, int(waiting), round(float(kv), 1)))
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", default="2h", help="simulated time of the log (default 2h: ~105 MB)")
    p.add_argument("--runs", type=int, default=3, help="runs of each side, median reported (default 3)")
    p.add_argument("--data-dir", type=Path, default=HERE / "data" / "lnav")
    p.add_argument("--json", type=Path, default=None, help="write the figures here too")
    p.add_argument("--baseline", default=None, metavar="REV",
                   help="also run servelens as of this git revision, in the same runs")
    a = p.parse_args(argv)
    lnav = ensure_lnav()
    if lnav is None:
        return {"skipped": True}
    version = subprocess.run([lnav, "-V"], capture_output=True, text=True).stdout.strip()
    logdir = a.data_dir / f"vllm-v1-{a.duration}"
    path = logdir / "vllm-a.log"
    if not path.exists():
        log(f"writing the log: servelens simulate --engine vllm --variant v1 --duration {a.duration} ...")
        run_cmd([servelens_bin(), "simulate", "--engine", "vllm", "--variant", "v1", "--duration", a.duration,
                 "--instances", "1", "--rate", "20", "--seed", "11", "--out", str(logdir)])
    size_mb = path.stat().st_size / 1e6
    work = Path(tempfile.mkdtemp(prefix="servelens-lnav-"))
    try:
        env = {**os.environ, "HOME": str(work / "home")}  # lnav's formats and state, not the user's
        (work / "home").mkdir()
        run_cmd([lnav, "-i", str(HERE / "lnav" / "vllm_log.json")], env=env)
        for d in PACKAGE_DIRS:  # the current tree's modules compiled too, as the baseline's are
            compileall.compile_dir(str(HERE.parent / d), quiet=1)
        sides = {"current": servelens_cmd(None)}
        if a.baseline:
            sides["baseline"] = servelens_cmd(baseline_tree(a.baseline, work))
        lnav_runs = []
        ingest_runs: dict[str, list] = {k: [] for k in sides}
        sql_runs: dict[str, list] = {k: [] for k in sides}
        for i in range(a.runs):
            r = run_cmd([lnav, "-n", "-c", LNAV_SQL, str(path)], env=env, timeout=1800)
            lnav_runs.append(r)
            line = f"run {i + 1}: lnav {r.cpu_s:.2f} CPU-s"
            # the sides take turns first, so neither always runs after the other
            for side in (list(sides) if i % 2 == 0 else list(sides)[::-1]):
                cmd, side_env = sides[side]
                store = work / f"store-{side}-{i}"
                ing = run_cmd([*cmd, "ingest", str(path), "--store", str(store), "-q"], env=side_env, timeout=3600)
                q = run_cmd([*cmd, "sql", SERVELENS_SQL, "--store", str(store), "-f", "csv"], env=side_env, timeout=600)
                ingest_runs[side].append(ing)
                sql_runs[side].append(q)
                shutil.rmtree(store)
                line += f"; {side}: ingest {ing.cpu_s:.2f} + sql {q.cpu_s:.2f} CPU-s"
            log(line)
        theirs = rows_of(lnav_runs[-1].stdout, None)
        agree = True
        for side in sides:
            ours = rows_of(sql_runs[side][-1].stdout, ",")
            if theirs != ours:
                agree = False
                log(f"the answers differ: lnav {len(theirs)} rows, servelens ({side}) {len(ours)} rows")
        res = {
            "date": time.strftime("%Y-%m-%d"), "lnav": version, "log_mb": round(size_mb, 1), "minutes": len(theirs),
            "answers_agree": agree, "runs": a.runs,
            "lnav_cpu_s": median([r.cpu_s for r in lnav_runs]), "lnav_wall_s": median([r.wall_s for r in lnav_runs]),
        }
        for side in sides:
            pre = "" if side == "current" else f"{side}_"
            res |= {
                f"{pre}ingest_cpu_s": median([r.cpu_s for r in ingest_runs[side]]),
                f"{pre}ingest_wall_s": median([r.wall_s for r in ingest_runs[side]]),
                f"{pre}sql_cpu_s": median([r.cpu_s for r in sql_runs[side]]),
                f"{pre}sql_wall_s": median([r.wall_s for r in sql_runs[side]]),
            }
            res[f"{pre}servelens_cpu_s"] = res[f"{pre}ingest_cpu_s"] + res[f"{pre}sql_cpu_s"]
            res[f"{pre}ratio_cpu"] = res[f"{pre}servelens_cpu_s"] / max(res["lnav_cpu_s"], 1e-9)
        if a.baseline:
            res["baseline"] = a.baseline
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n### One-shot post-mortem beside lnav ({res['date']}, {res['log_mb']} MB vLLM V1 log, "
          f"median of {a.runs})\n")
    print("| | CPU-s | wall s |\n|---|---|---|")
    print(f"| {res['lnav']} (format file + one SQL query) | {res['lnav_cpu_s']:.2f} | {res['lnav_wall_s']:.2f} |")
    for pre, name in ([("baseline_", f"servelens at {a.baseline}")] if a.baseline else []) + [("", "servelens")]:
        print(f"| {name}: ingest into a new store | {res[pre + 'ingest_cpu_s']:.2f} | {res[pre + 'ingest_wall_s']:.2f} |")
        print(f"| {name}: sql (the same question) | {res[pre + 'sql_cpu_s']:.2f} | {res[pre + 'sql_wall_s']:.2f} |")
        print(f"| {name}: both | {res[pre + 'servelens_cpu_s']:.2f} ({res[pre + 'ratio_cpu']:.1f}x lnav) | "
              f"{res[pre + 'ingest_wall_s'] + res[pre + 'sql_wall_s']:.2f} |")
    print(f"\nAnswers agree row for row ({res['minutes']} minutes): {'yes' if res['answers_agree'] else 'NO'}")
    if a.json:
        a.json.write_text(json.dumps(res, indent=2))
    return res


if __name__ == "__main__":
    main()
