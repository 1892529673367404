"""TGI inputs with varied sampling parameters, for measuring the `sampling_params` column
(bench/RESULTS.md, "TGI sampling parameters"): a copy of a generated TGI log directory
(bench/gen.py) whose request dumps take one of 64 None/Some patterns of six parameters, and
with `--seeds`, a requested seed on about half of them (clients that send one per request).

    python bench/tgiparams.py SRC_DIR DST_DIR [--seeds]
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

_DUMP = re.compile(
    r"temperature: Some\(0\.7\), repetition_penalty: None, frequency_penalty: None, "
    r"top_k: None, top_p: None, typical_p: None"
)


def _some(on: int, value: str) -> str:
    return f"Some({value})" if on else "None"


def vary(src: Path, dst: Path, seeds: bool) -> int:
    dst.mkdir(parents=True, exist_ok=True)
    n = 0
    for f in sorted(src.glob("*.log")):
        out = []
        for line in f.read_text().splitlines(True):
            if "GenerateParameters {" in line:
                n += 1
                v = n * 2654435761 % 2**32  # a fixed scramble: the same file every time
                b = [(v >> i) & 1 for i in range(8)]
                rep = (f"temperature: {_some(b[0], '0.7')}, repetition_penalty: {_some(b[1], '1.1')}, "
                       f"frequency_penalty: {_some(b[2], '0.2')}, top_k: {_some(b[3], '50')}, "
                       f"top_p: {_some(b[4], '0.9')}, typical_p: {_some(b[5], '0.95')}")
                line = _DUMP.sub(rep, line, count=1)
                if seeds and b[6]:
                    line = line.replace("seed: None, top_n_tokens", f"seed: Some({n}), top_n_tokens", 1)
            out.append(line)
        (dst / f.name).write_text("".join(out))
    return n


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("src", type=Path)
    p.add_argument("dst", type=Path)
    p.add_argument("--seeds", action="store_true")
    a = p.parse_args()
    print(f"{vary(a.src, a.dst, a.seeds):,} request dumps varied")
