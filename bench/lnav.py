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
"""

from __future__ import annotations

import argparse
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
        lnav_runs, ingest_runs, sql_runs = [], [], []
        for i in range(a.runs):
            r = run_cmd([lnav, "-n", "-c", LNAV_SQL, str(path)], env=env, timeout=1800)
            lnav_runs.append(r)
            store = work / f"store-{i}"
            ing = run_cmd([servelens_bin(), "ingest", str(path), "--store", str(store), "-q"], timeout=3600)
            q = run_cmd([servelens_bin(), "sql", SERVELENS_SQL, "--store", str(store), "-f", "csv"], timeout=600)
            ingest_runs.append(ing)
            sql_runs.append(q)
            shutil.rmtree(store)
            log(f"run {i + 1}: lnav {r.cpu_s:.2f} CPU-s; servelens ingest {ing.cpu_s:.2f} + sql {q.cpu_s:.2f} CPU-s")
        theirs, ours = rows_of(lnav_runs[-1].stdout, None), rows_of(sql_runs[-1].stdout, ",")
        agree = theirs == ours
        if not agree:
            log(f"the answers differ: lnav {len(theirs)} rows, servelens {len(ours)} rows")
        res = {
            "date": time.strftime("%Y-%m-%d"), "lnav": version, "log_mb": round(size_mb, 1), "minutes": len(ours),
            "answers_agree": agree,
            "lnav_cpu_s": median([r.cpu_s for r in lnav_runs]), "lnav_wall_s": median([r.wall_s for r in lnav_runs]),
            "ingest_cpu_s": median([r.cpu_s for r in ingest_runs]), "ingest_wall_s": median([r.wall_s for r in ingest_runs]),
            "sql_cpu_s": median([r.cpu_s for r in sql_runs]), "sql_wall_s": median([r.wall_s for r in sql_runs]),
        }
        res["servelens_cpu_s"] = res["ingest_cpu_s"] + res["sql_cpu_s"]
        res["ratio_cpu"] = res["servelens_cpu_s"] / max(res["lnav_cpu_s"], 1e-9)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n### One-shot post-mortem beside lnav ({res['date']}, {res['log_mb']} MB vLLM V1 log, "
          f"median of {a.runs})\n")
    print("| | CPU-s | wall s |\n|---|---|---|")
    print(f"| {res['lnav']} (format file + one SQL query) | {res['lnav_cpu_s']:.2f} | {res['lnav_wall_s']:.2f} |")
    print(f"| servelens ingest into a new store | {res['ingest_cpu_s']:.2f} | {res['ingest_wall_s']:.2f} |")
    print(f"| servelens sql (the same question) | {res['sql_cpu_s']:.2f} | {res['sql_wall_s']:.2f} |")
    print(f"| servelens, both | {res['servelens_cpu_s']:.2f} ({res['ratio_cpu']:.1f}x lnav) | "
          f"{res['ingest_wall_s'] + res['sql_wall_s']:.2f} |")
    print(f"\nAnswers agree row for row ({res['minutes']} minutes): {'yes' if agree else 'NO'}")
    if a.json:
        a.json.write_text(json.dumps(res, indent=2))
    return res


if __name__ == "__main__":
    main()
