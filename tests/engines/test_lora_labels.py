"""Low-rank ES is EGGROLL, not the study's full-rank ES: the label every table uses, and the
runs table / report note that says a verdict rests on low-rank runs (issue 43). No model needed."""

import pandas as pd
from helpers import run_config

from esopt.algorithms.es import ESRun, noise_label
from esopt.engines import lora
from esopt.study.report import page as report
from esopt.study.run_read import _summary_row


def test_labels_name_the_rank_and_the_scope():
    assert noise_label(run_config("model=tiny-s", "algo=es")) == "full-rank"
    assert noise_label(run_config("model=tiny-s", "algo=es", "es.batched=true", "es.perturb_rank=4")) == "EGGROLL r=4"
    rc = run_config("model=tiny-s", "algo=es", "es.batched=true", "es.targets=linear")
    assert ESRun.from_run(rc).label == "EGGROLL r=1, linear layers"
    assert noise_label(run_config("model=tiny-s", "algo=grpo")) is None


def test_linear_targets_are_the_linear_layers_weights():
    shapes = {"model.embed_tokens.weight": (10, 4), "lm_head.weight": (10, 4), "model.norm.weight": (4,),
              "model.layers.0.self_attn.q_proj.weight": (4, 4), "model.layers.0.self_attn.q_proj.bias": (4,),
              "model.layers.0.mlp.down_proj.weight": (4, 8)}
    assert [n for n, s in shapes.items() if lora.is_linear_target(n, s)] == [
        "model.layers.0.self_attn.q_proj.weight", "model.layers.0.mlp.down_proj.weight"]
    assert lora.smallest_dim({"hidden_size": 64, "num_attention_heads": 2, "num_key_value_heads": 1,
                              "intermediate_size": 128}) == 32
    assert [lora.vllm_max_lora_rank(r) for r in (1, 2, 8, 9)] == [1, 8, 8, 16]


def test_runs_table_and_claims_say_low_rank():
    base = {"status": "completed", "algo": "es", "model": {"name": "tiny-s"}}
    row = _summary_row("r1", {**base, "effective": {"es_noise": "EGGROLL r=2, linear layers", "es_rank": 2}})
    assert row["es_noise"] == "EGGROLL r=2, linear layers"
    runs = pd.DataFrame([row, _summary_row("r2", {**base, "effective": {"es_noise": "full-rank"}})])
    assert report.low_rank_labels(runs) == ["EGGROLL r=2, linear layers"]
    claim = {"id": 1, "claim": "c", "estimand": "e", "statistic": "t", "variance": "v", "decision": "d",
             "effect": 0.1, "ci": None, "boundary": 0.0, "sesoi": 0.05, "power": 0.9, "n": {}, "reproduced": "yes",
             "reason": "r", "details": {}}
    page = report.claims_html({"claims": [claim]}, report.low_rank_labels(runs))
    assert 'id="claims-low-rank"' in page and "yes (low-rank ES runs: EGGROLL r=2, linear layers)" in page
    assert "claims-low-rank" not in report.claims_html({"claims": [claim]}, [])


def test_claims_json_and_its_table_name_low_rank_es_runs():
    from esopt.study.claims import compute, table_lines

    recs = [{"run_id": f"r{i}", "algo": a, "seed": i, "status": "completed", "model": "tiny-s",
             **({"es_noise": "EGGROLL r=2, linear layers"} if a == "es" else {})}
            for i, a in enumerate(("none", "es"))]
    out = compute(recs)
    assert out["cell"]["es_noise"] == ["EGGROLL r=2, linear layers"]
    assert "low-rank ES runs (EGGROLL r=2, linear layers)" in table_lines(out)[1]
    recs[1]["es_noise"] = "full-rank"
    out = compute(recs)
    assert out["cell"]["es_noise"] == ["full-rank"] and "low-rank" not in table_lines(out)[1]
