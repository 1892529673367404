"""The engines' availability rows, read from their folders (parsers/engines/<engine>/
availability.toml), give `metric_availability` exactly the rows it gave when the catalogue was
written inside the view: pinned here once, from that view, over the committed sample logs. A
pin of the program's earlier output, as the tests' names say: its figures are not truth."""

from __future__ import annotations

import hashlib
import json

from tests.helpers.common import SAMPLE_LOGS
from typer.testing import CliRunner

from servelens.parsers import ENGINES
from servelens.parsers.availability import availability_file, availability_rows, catalogue

# sha256 of the catalogue as the view held it (engine, metric, view, estimated, provides,
# missing), engines in registry order: a changed reason shows here and in docs/metrics.md
CATALOGUE_SHA256 = "fb3ab4cb70127abb224c68840373ca18bc38bd2b988cfdfff7b40e45968a9957"

# engine,metric,view,available,n_values,estimated,sources,md5(reason) over the sample logs
# below, ingested with --year 2026 (as the view answered before the rows moved)
PINNED = """\
client,e2e_s,requests,true,9,false,client 9,9588c33caa13d4a82624e6cb1cd28584
client,tpot_s,requests,true,9,false,client 9,d183038a0959c83e33892d5e282b92a7
client,ttft_s,requests,true,9,false,client 9,560995df0e5e80790904447c96f0e6c1
llamacpp,e2e_s,requests,true,24,true,log 24,2835b1740c2b0f4999360bb005434897
llamacpp,fill,batch_fill,true,23,true,,cee7e3059fd29e23cd0e64b261b3e1d1
llamacpp,gen_tps,throughput,true,12,false,,f0db5daea739ac4845cd119504cc5c5b
llamacpp,kv_usage,kv_cache,false,0,false,,07d7ce72210529ba18a6ea16f71b2001
llamacpp,preemptions,kv_cache,false,0,false,,becd0205f7c25e3b20018455a8ca3fe4
llamacpp,queue_s,requests,false,0,false,,a4beefa5b45dad59b2c61993b83ba69b
llamacpp,running,batch_fill,true,227,true,,d688c4ccd7e20183b67f80d8816a2126
llamacpp,tpot_s,requests,true,22,false,log 22,c65378dec68522001fe6021f0ecf2f4b
llamacpp,ttft_s,requests,false,0,false,,c31ba125aec186722fc931cb2f4c4b98
llamacpp,waiting,queue_depth,false,0,true,,71a8d886f4fa15878c46da3afeb6b793
sglang,e2e_s,requests,true,1,false,log 1,b87ad1e95459710dbdf75dfb50068a7d
sglang,fill,batch_fill,false,0,false,,eb72bbe2d5df52bb8672b1a043a6afc1
sglang,gen_tps,throughput,true,78,false,,6aa563bc097ad3af710ecdd0902a6ee6
sglang,kv_usage,kv_cache,true,117,false,,ad73c9c8897e4e059cb624f310e3388d
sglang,preemptions,kv_cache,true,1,false,,2f2b56cf4450fdb3a1e73e81502dff72
sglang,queue_s,requests,true,2,false,,6f207cb92bb00aa7de52628a9df2b705
sglang,running,batch_fill,true,120,false,,66c67d18a50ca24564a619c6f5c85597
sglang,tpot_s,requests,false,0,false,,3d53f75030a7e7352497403f8131a8f5
sglang,ttft_s,requests,false,0,false,,54111d2e1fbaa2202476799bcb3c65ed
sglang,waiting,queue_depth,true,120,false,,44d2f547e0ca01624808e2bc4c42a2a4
tgi,e2e_s,requests,true,1656,false,log 1656,84e04f10aa7ae430f06bfe7201074234
tgi,fill,batch_fill,false,0,false,,386806bfa9c2fe7c4187f129a870b0b4
tgi,gen_tps,throughput,false,0,false,,025a1f1979ffdce52e2dfb1a160ef0f0
tgi,kv_usage,kv_cache,false,0,false,,765357558483d73d1d50ec3a5e0c3e45
tgi,preemptions,kv_cache,false,0,false,,33db0f72fe0f51605064cb9207a943c4
tgi,queue_s,requests,true,1656,false,,7520f3e8413717db7a5b881735fcb6b5
tgi,running,batch_fill,true,487,true,,93d9448902922006ba4748a454379374
tgi,tpot_s,requests,true,1656,false,log 1656,7199f272df57cb235b04f67667090c86
tgi,ttft_s,requests,false,0,false,,019ab02e80ae90b031e98d7e63784108
tgi,waiting,queue_depth,true,487,true,,f8e55afe53155204774d987c498eb069
trtllm,e2e_s,requests,false,0,false,,73b618d56f9f7721ae0a09850c67ea8b
trtllm,fill,batch_fill,true,484,false,,f9333e9b9510a52a87b141ec8f00c12b
trtllm,gen_tps,throughput,false,0,false,,d43c0f775038854f047bc535dbf3684f
trtllm,kv_usage,kv_cache,true,485,false,,5f52282dc55bd26f731ef2741274b5ea
trtllm,preemptions,kv_cache,false,0,false,,3b6a6e53f97e8cf10a714319bded0666
trtllm,queue_s,requests,false,0,false,,9da1d8edad27abd3220f6c12c897053e
trtllm,running,batch_fill,true,487,false,,907434c624d345ee51a8cac80bd276f9
trtllm,tpot_s,requests,false,0,false,,9da1d8edad27abd3220f6c12c897053e
trtllm,ttft_s,requests,false,0,false,,9da1d8edad27abd3220f6c12c897053e
trtllm,waiting,queue_depth,true,485,true,,7d533531830a372cea4be1c3a1e20fd0
vllm,e2e_s,requests,true,1655,true,wrapper 1655,f043d9915d5d8343e9b8a51974ebe44d
vllm,fill,batch_fill,true,94,false,,6ff5c28b566a5ecc1f3f76743bc582a7
vllm,gen_tps,throughput,true,94,false,,9f5f48a1e453efa9a9923129837f58a2
vllm,kv_usage,kv_cache,true,94,false,,1c20d9e97d1bfb1fdf324907eb709ee7
vllm,preemptions,kv_cache,true,1,false,,1cfa8e9b2e87cd8635c2ffbeff9a4bb0
vllm,queue_s,requests,false,0,false,,5a1606794f1bd2edb09b7145abaeb818
vllm,running,batch_fill,true,94,false,,8f0b49b0c7597d0c23ce9c66eeef5e3a
vllm,tpot_s,requests,false,0,false,,39bc9569548541a6dbc0e3d8f51262a4
vllm,ttft_s,requests,false,0,false,,cc2431d43fffef4dabd1084210d55316
vllm,waiting,queue_depth,true,94,false,,72eab1dbb28daabfa3812cbc3bf6b454
"""


def test_pins_the_catalogue_the_view_held():
    got = json.dumps([list(r) for r in catalogue()], ensure_ascii=False)
    assert hashlib.sha256(got.encode()).hexdigest() == CATALOGUE_SHA256
    assert len(catalogue()) == 53
    assert [r[:2] for r in catalogue()[:2]] == [("vllm", "e2e_s"), ("vllm", "ttft_s")]


def test_every_built_in_engine_has_its_rows():
    for engine in ENGINES:
        rows = availability_rows(engine)
        assert rows, f"{engine}: no rows in {availability_file(engine)}"
        assert len({r["metric"] for r in rows}) == len(rows), engine


def test_pins_metric_availability_over_the_samples_as_the_view_gave_it(tmp_path):
    from servelens.pipeline.cli.app import app, build_app
    from servelens.pipeline.query.connect import run

    build_app()
    store = tmp_path / "store"
    dirs = [SAMPLE_LOGS / d for d in ("incident", "sglang", "llamacpp", "tgi", "trtllm", "client")]
    r = CliRunner().invoke(app, ["ingest", *map(str, dirs), "--store", str(store), "--year", "2026", "-q"])
    assert r.exit_code == 0, r.output
    got = run(store, "select engine, metric, view, available, estimated, sources, md5(reason) as r "
                     "from metric_availability order by engine, metric")
    lines = [",".join("" if v is None else str(v).lower() if isinstance(v, bool) else str(v) for v in row)
             for row in got.iter_rows()]
    # n_values (the fifth field) counts what the data pipeline reads, which other changes move;
    # the rows' move out of the SQL is about the other fields
    assert lines == [",".join(f for i, f in enumerate(line.split(",")) if i != 4) for line in PINNED.splitlines()]
