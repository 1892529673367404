"""Writes tests/fixtures/gcloud_yaml/: the sample logs of test_wrappers_gcloud_yaml.py as
`gcloud logging read` prints them by default, run by hand when the samples change
(`.venv/bin/python -m tests.helpers.gen_gcloud_yaml` from the repository; needs PyYAML, not a dependency of the suite).

gcloud's YAML printer: a safe dumper in block style, `---` before each record, width 80, a
string holding a newline written as a literal block; the records newest first. One entry in
four keeps the line's newline (as a GKE agent may), so both the folded and the block styles
are in each file; one file carries the line in `jsonPayload.message`."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.helpers import wrapping as wr
from tests.helpers.wrapping_exports import gcp_entry

HERE = Path(__file__).resolve().parents[1]
ROOT = HERE.parent

OUT = HERE / "fixtures" / "gcloud_yaml"
SAMPLES = {
    "vllm_v1_0_11": ("vllm", "sample_logs/vllm/real/v1_0_11.log"),
    "sglang_v0_4_2025": ("sglang", "sample_logs/sglang/real/v0_4_2025.log"),
    "llamacpp_era_b": ("llamacpp", "sample_logs/llamacpp/real/era_b_2024_startup_9928.log"),
    "tgi_launcher_traceback": ("tgi", "sample_logs/tgi/real/launcher_traceback.log"),
    "trtllm_backtraces": ("trtllm", "sample_logs/trtllm/real/backtraces.log"),
}


class _Literal(str):
    pass


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(_Literal, lambda d, s: d.represent_scalar("tag:yaml.org,2002:str", s, style="|"))


def _literal(v):
    if isinstance(v, dict):
        return {k: _literal(x) for k, x in v.items()}
    return _Literal(v) if isinstance(v, str) and "\n" in v else v


def times_of(lines: list[str], engine: str) -> list[int]:
    times = wr.line_times(lines, engine)
    for i in range(1, len(times)):
        times[i] = max(times[i], times[i - 1] + 1_000)
    return times


def gcloud_yaml(lines: list[str], times: list[int], json_payload: bool = False) -> str:
    docs = []
    for i, (ln, t) in enumerate(zip(lines, times)):
        e = gcp_entry(ln, t, i=i)
        if i % 4:
            e["textPayload"] = ln
        if json_payload:
            e["jsonPayload"] = {"message": e.pop("textPayload"), "stream": "stdout"}
        docs.append(yaml.dump(_literal(e), Dumper=_Dumper, default_flow_style=False, allow_unicode=True,
                              explicit_start=True, indent=2, width=80))
    return "".join(docs[::-1])


if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    for name, (engine, rel) in SAMPLES.items():
        lines = wr.split_lines((ROOT / rel).read_text())
        (OUT / f"{name}.yaml").write_text(gcloud_yaml(lines, times_of(lines, engine)))
    engine, rel = SAMPLES["vllm_v1_0_11"]
    lines = wr.split_lines((ROOT / rel).read_text())
    (OUT / "vllm_v1_0_11_jsonpayload.yaml").write_text(gcloud_yaml(lines, times_of(lines, engine), json_payload=True))
