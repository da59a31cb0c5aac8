"""esopt.distributed: 2 CPU ranks (gloo, launched with torchrun) end with the 1-rank weights
(plain members for two iterations, then antithetic pairs for two)."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import torch

from esopt import noise
from esopt.algorithms import distributed, es

TESTS = Path(__file__).resolve().parent.parent  # helpers.py

WORKER = textwrap.dedent("""
    import os, sys, json, torch
    torch.set_num_threads(1)
    sys.path.insert(0, {tests!r})
    from helpers import SevensTask, tiny_model
    from esopt import noise
    from esopt.algorithms import distributed, es
    from esopt.engines.hf import HFEngine
    from esopt.models.tiny import char_tokenizer
    assert distributed.init() and distributed.world_size() == 2
    engine = HFEngine(tiny_model(0), char_tokenizer(), device="cpu")
    task = SevensTask({{}})
    rows = list(task.split("train"))
    plain = es.ESRun(pop=6, sigma=0.05, lr=0.08, batch_size=6, seed=3)
    anti = es.ESRun(pop=6, sigma=0.05, lr=0.08, batch_size=6, seed=3, antithetic=True)
    log = [es.es_step(engine, task, rows, plain if it < 3 else anti, it) for it in (1, 2, 3, 4)]
    distributed.check_same_weights(list(engine.named_parameters()), where="end")
    if distributed.rank() == 1:  # a drifted rank must be caught by the checksum
        with torch.no_grad():
            p = next(engine.model.parameters()); p.view(torch.int32).view(-1)[0] += 1
    try:
        distributed.check_same_weights(list(engine.named_parameters()), where="drift test")
        caught = False
    except RuntimeError as e:
        caught = "differ across ranks" in str(e)
    if distributed.rank() == 0:
        torch.save(dict(engine.model.named_parameters()), {out!r})
        json.dump({{"rewards": [x["rewards"] for x in log], "tokens": [x["tokens_generated"] for x in log],
                   "caught": caught}}, open({out!r} + ".json", "w"))
    else:
        assert caught
    distributed.shutdown()
    sys.stdout.flush()
    os._exit(0)  # gloo's teardown at interpreter exit aborted a rank once under load (SIGABRT, a joinable
                 # std::thread) after everything above had run and been written: skip the teardown
""")


def test_two_ranks_equal_one_rank(tmp_path):
    import json

    from helpers import SevensTask, tiny_model

    from esopt.engines.hf import HFEngine
    from esopt.models.tiny import char_tokenizer

    out = str(tmp_path / "rank0.pt")
    script = tmp_path / "worker.py"
    script.write_text(WORKER.format(tests=str(TESTS), out=out))
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                           "--standalone", str(script)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]

    engine = HFEngine(tiny_model(0), char_tokenizer(), device="cpu")  # the 1-rank reference
    task = SevensTask({})
    rows = list(task.split("train"))
    plain = es.ESRun(pop=6, sigma=0.05, lr=0.08, batch_size=6, seed=3)
    anti = es.ESRun(pop=6, sigma=0.05, lr=0.08, batch_size=6, seed=3, antithetic=True)
    log = [es.es_step(engine, task, rows, plain if it < 3 else anti, it) for it in (1, 2, 3, 4)]

    two = torch.load(out)
    one = dict(engine.model.named_parameters())
    assert all(torch.equal(one[k], two[k]) for k in one)
    assert noise.checksum(one.items()) == noise.checksum(two.items())
    got = json.load(open(out + ".json"))
    assert got["rewards"] == [x["rewards"] for x in log]
    assert got["tokens"] == [x["tokens_generated"] for x in log]
    assert got["caught"]
    assert any(len(set(r)) > 1 for r in got["rewards"])  # a non-trivial update happened


def test_member_split_covers_everyone_once():
    for pop, world in [(16, 2), (6, 4), (5, 3)]:
        got = sorted(i for r in range(world) for i in distributed.my_members(pop, world, r))
        assert got == list(range(pop))
    assert distributed.my_members(8, 2, 1, antithetic=True) == [2, 3, 6, 7]  # pairs stay together


def test_single_process_is_a_no_op():
    assert distributed.world_size() == 1 and distributed.rank() == 0
    r, s, t = distributed.gather_members([0, 1], [0.5, 0.25], [[1.0], [0.0]], 7, 2, 1)
    assert r.tolist() == [0.5, 0.25] and s.tolist() == [[1.0], [0.0]] and t == 7
    assert distributed.check_same_weights([("w", torch.ones(3))]) == noise.checksum([("w", torch.ones(3))])


def test_slurm_env_translation(monkeypatch):
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"):
        # set then delete, so monkeypatch records the key and removes what _slurm_env adds
        # (a leaked RANK/WORLD_SIZE makes later tests' accelerate try to rendezvous)
        monkeypatch.setenv(k, "")
        monkeypatch.delenv(k)
    monkeypatch.setenv("SLURM_PROCID", "3")
    monkeypatch.setenv("SLURM_NTASKS", "4")
    monkeypatch.setenv("SLURM_LOCALID", "1")
    monkeypatch.setenv("SLURM_JOB_ID", "12345")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu[07-08]")
    monkeypatch.setenv("PATH", "/nonexistent")  # no scontrol: parse the node list
    distributed._slurm_env()
    assert (os.environ["RANK"], os.environ["WORLD_SIZE"], os.environ["LOCAL_RANK"]) == ("3", "4", "1")
    assert os.environ["MASTER_ADDR"] == "gpu07" and os.environ["MASTER_PORT"] == str(20000 + 12345)
