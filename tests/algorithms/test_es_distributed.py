"""esopt.algorithms.distributed: 2 CPU ranks (gloo, launched with torchrun) end with the 1-rank weights
(plain members for two iterations, then antithetic pairs for two), evaluate their shares of the
problems into the 1-rank result bit for bit, and a rank stalled past the process group's timeout
fails the other's collective with one line naming the setting. One launch serves all three: the
subject is the processes themselves, and each start costs seconds."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import torch

from esopt import noise
from esopt.algorithms import distributed, es
from esopt.evaluator import evaluate

TESTS = Path(__file__).resolve().parent.parent  # helpers.py

TIMEOUT = 12  # seconds: the group's timeout (an ES step of tiny_model takes well under one)
WORKER = "TIMEOUT = %d\n" % TIMEOUT + textwrap.dedent("""
    import os, sys, json, time, torch
    from pathlib import Path
    torch.set_num_threads(1)
    sys.path.insert(0, {tests!r})
    from helpers import SevensTask, tiny_model
    from esopt import noise
    from esopt.algorithms import distributed, es
    from esopt.engines.hf import HFEngine
    from esopt.evaluator import evaluate
    from esopt.models.tiny import char_tokenizer
    rank = int(os.environ["RANK"])
    Path({out!r} + f".ready{{rank}}").touch()  # both ranks up before the group's short timeout runs
    while not all(Path({out!r} + f".ready{{r}}").exists() for r in (0, 1)):
        time.sleep(0.05)
    assert distributed.init(timeout_s=TIMEOUT, why="model.resources.collective_timeout_min=0.2")
    assert distributed.world_size() == 2
    engine = HFEngine(tiny_model(0), char_tokenizer(), device="cpu")
    task = SevensTask({{}})
    rows = list(task.split("train"))
    plain = es.ESRun(pop=6, sigma=0.05, lr=0.08, batch_size=6, seed=3)
    anti = es.ESRun(pop=6, sigma=0.05, lr=0.08, batch_size=6, seed=3, antithetic=True)
    log = [es.es_step(engine, task, rows, plain if it < 3 else anti, it) for it in (1, 2, 3, 4)]
    distributed.check_same_weights(list(engine.named_parameters()), where="end")
    records = []  # before rank 1 drifts below
    ev = evaluate(engine, task, split="train", problems=7, samples=4, temperature=0.8, seed=5,
                  completions=records, shards=distributed.shards())
    ev.pop("wall_s")
    if distributed.rank() == 1:  # a drifted rank must be caught by the checksum
        with torch.no_grad():
            p = next(engine.model.parameters()); p.view(torch.int32).view(-1)[0] += 1
    try:
        distributed.check_same_weights(list(engine.named_parameters()), where="drift test")
        caught = False
    except RuntimeError as e:
        caught = "differ across ranks" in str(e)
    stalled = None
    if distributed.rank() == 1:
        time.sleep(TIMEOUT + 4)  # stalled past the timeout: rank 0's next collective must end
    else:
        try:
            distributed.barrier()
        except distributed.CollectiveTimeout as e:
            stalled = str(e)
    if distributed.rank() == 0:
        torch.save(dict(engine.model.named_parameters()), {out!r})
        json.dump({{"rewards": [x["rewards"] for x in log], "tokens": [x["tokens_generated"] for x in log],
                   "caught": caught, "eval": ev, "records": records, "stalled": stalled}},
                  open({out!r} + ".json", "w"), default=str)
    else:
        assert caught
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
    records = []
    ev = evaluate(engine, task, split="train", problems=7, samples=4, temperature=0.8, seed=5, completions=records)
    ev.pop("wall_s")
    assert got["eval"] == json.loads(json.dumps(ev, default=str))  # Pass@K, entropy, CIs: to the bit
    assert got["records"] == json.loads(json.dumps(records, default=str))  # the same completions
    assert 0 < ev["entropy"] and ev["n_problems"] == 7
    assert got["stalled"].count("\n") == 0 and "model.resources.collective_timeout_min" in got["stalled"]
    assert "0.2 min" in got["stalled"] and "waited longer than the process group's timeout" in got["stalled"]
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
    """ES over two nodes (``hydra.launcher.nodes=2``, two tasks a node): the torch.distributed
    environment each of the four Slurm tasks builds from its own SLURM_* variables. Ranks 0-3,
    a local rank per node, and one rendezvous (the node list's first host, a port from the job
    id) that every task agrees on; a launch that already names its rank is left alone."""
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"):
        # set then delete, so monkeypatch records the key and removes what _slurm_env adds
        # (a leaked RANK/WORLD_SIZE makes later tests' accelerate try to rendezvous)
        monkeypatch.setenv(k, "")
        monkeypatch.delenv(k)
    monkeypatch.setenv("SLURM_NTASKS", "4")
    monkeypatch.setenv("SLURM_JOB_ID", "12345")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu[07-08]")
    monkeypatch.setenv("PATH", "/nonexistent")  # no scontrol: parse the node list
    built = []
    for procid, local in enumerate([0, 1, 0, 1]):   # gpu07's two tasks, then gpu08's
        for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"):
            os.environ.pop(k, None)
        monkeypatch.setenv("SLURM_PROCID", str(procid))
        monkeypatch.setenv("SLURM_LOCALID", str(local))
        distributed._slurm_env()
        built.append(tuple(os.environ[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")))
        assert (distributed.launched_world(), distributed.launched_rank()) == (4, procid)
    assert built == [(str(r), "4", str(r % 2), "gpu07", str(20000 + 12345)) for r in range(4)]
    monkeypatch.setenv("SLURM_PROCID", "0")
    distributed._slurm_env()                     # RANK already set (torchrun): not overwritten
    assert os.environ["RANK"] == "3"