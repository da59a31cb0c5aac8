"""Multi-process ES with ``torch.distributed``: members split across ranks, rewards gathered.

Every rank holds the full model, scores members ``i`` with ``i % world == rank``, and the
rewards (plus per-prompt success, for the diagnostics) are combined across ranks; every rank
then applies the identical update from the shared seeds and rewards (esopt.noise.update), so
weights never travel. A periodic checksum (esopt.noise.checksum, exact integer arithmetic on the
weights' bit patterns) is compared across ranks to catch drift.

Launch::

    torchrun --nproc-per-node 2 -m esopt.sweep algo=es ...        (RANK/WORLD_SIZE set by torchrun)
    srun --ntasks 4 python -m esopt.sweep algo=es ...             (SLURM_PROCID/SLURM_NTASKS)

Backend: NCCL when the weights are on CUDA, gloo on CPU. Without either environment this is a
single process and every helper is a no-op.

Evaluations are split too (:class:`Shards`): every rank evaluates a contiguous block of the
problems and the per-problem results are gathered, so no rank waits at a collective while
another evaluates alone. The process group's timeout is the run's (``init(timeout_s=...)``,
from its token bound: ``esopt.runtime.budget.collective_timeout``); a collective that still times
out raises :class:`CollectiveTimeout`, one line naming the setting that bounds it.
"""

from __future__ import annotations

import atexit
import datetime
import os
import re
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from esopt import noise


def _slurm_env() -> None:
    """Translate a multi-task Slurm step (or submitit's local executor with several tasks) into
    torch.distributed's env:// variables."""
    if "RANK" in os.environ:
        return
    if int(os.environ.get("SUBMITIT_LOCAL_NTASKS", "1")) > 1:  # submitit_local launcher
        os.environ["RANK"] = os.environ["SUBMITIT_LOCAL_GLOBALID"]
        os.environ["WORLD_SIZE"] = os.environ["SUBMITIT_LOCAL_NTASKS"]
        os.environ.setdefault("LOCAL_RANK", os.environ.get("SUBMITIT_LOCAL_LOCALID", "0"))
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(20000 + int(os.environ.get("SUBMITIT_LOCAL_JOB_ID", "0")) % 20000))
        return
    if int(os.environ.get("SLURM_NTASKS", "1")) < 2:
        return
    os.environ["RANK"] = os.environ["SLURM_PROCID"]
    os.environ["WORLD_SIZE"] = os.environ["SLURM_NTASKS"]
    os.environ.setdefault("LOCAL_RANK", os.environ.get("SLURM_LOCALID", "0"))
    if "MASTER_ADDR" not in os.environ:
        nodelist = os.environ.get("SLURM_STEP_NODELIST") or os.environ.get("SLURM_JOB_NODELIST", "localhost")
        try:
            host = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True,
                                  text=True, check=True).stdout.split()[0]
        except (OSError, subprocess.CalledProcessError, IndexError):
            host = first_host(nodelist)
        os.environ["MASTER_ADDR"] = host
    os.environ.setdefault("MASTER_PORT", str(20000 + int(os.environ.get("SLURM_JOB_ID", "0")) % 20000))


def first_host(nodelist: str) -> str:
    """First host of a Slurm node list: ``gpu[07-08,11],cpu1`` -> ``gpu07``."""
    m = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist)
    if not m:
        return "localhost"
    prefix, ranges = m.group(1), m.group(2)
    return prefix + (re.split(r"[,-]", ranges)[0] if ranges else "")


def launched_world() -> int:
    """Processes in this launch, from the environment (torchrun WORLD_SIZE, Slurm SLURM_NTASKS
    or submitit's local SUBMITIT_LOCAL_NTASKS), before any process group exists; 1 when not
    launched as a group."""
    env = os.environ
    return int(env.get("WORLD_SIZE") or env.get("SLURM_NTASKS") or env.get("SUBMITIT_LOCAL_NTASKS") or 1)


def launched_rank() -> int:
    """This process's rank in the launch; 0 when not launched as a group. The sweep entry uses it
    to make ranks > 0 silent ES workers (no summary, no evaluation)."""
    if launched_world() < 2:
        return 0
    env = os.environ
    return int(env.get("RANK") or env.get("SLURM_PROCID") or env.get("SUBMITIT_LOCAL_GLOBALID") or 0)


class CollectiveTimeout(RuntimeError):
    """A collective waited longer than the process group's timeout (one line naming its setting)."""


TIMEOUT_SETTING = "model.resources.collective_timeout_min"
_timeout: dict = {"s": None, "why": ""}  # this process group's timeout and where it came from


def init(device: str | torch.device | None = None, timeout_s: float | None = None, why: str = "") -> bool:
    """Join the process group if launched by torchrun or Slurm with several tasks, with a
    timeout of ``timeout_s`` seconds on every collective (None: torch's default; ``why``: where
    the value came from, for the error a timeout raises).

    Returns True when running distributed. Idempotent.
    """
    if dist.is_available() and dist.is_initialized():
        return True
    _slurm_env()
    if int(os.environ.get("WORLD_SIZE", "1")) < 2:
        return False
    cuda = torch.cuda.is_available() and (device is None or torch.device(device).type == "cuda")
    if cuda:  # Slurm's gpus_per_task leaves each rank only its own GPU(s) visible
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    kwargs = {} if timeout_s is None else {"timeout": datetime.timedelta(seconds=float(timeout_s))}
    _timeout.update(s=timeout_s, why=why)
    dist.init_process_group(backend="nccl" if cuda else "gloo", init_method="env://", **kwargs)
    atexit.register(_destroy)  # a live gloo/NCCL group at interpreter exit can abort the process
    return True


def _timed_out(e: BaseException) -> bool:
    text = str(e).lower()
    return "timed out" in text or "timeout" in text


@contextmanager
def collective(what: str):
    """Around a collective: a timeout becomes :class:`CollectiveTimeout`, one line naming the
    setting that bounds the wait (its value and where it came from)."""
    try:
        yield
    except CollectiveTimeout:
        raise
    except RuntimeError as e:  # gloo: RuntimeError; NCCL: DistBackendError (a RuntimeError)
        if not _timed_out(e):
            raise
        limit = _timeout["s"]
        said = f"{limit / 60:.4g} min" if limit else "torch's default"
        raise CollectiveTimeout(
            f"{what}: a rank waited longer than the process group's timeout ({said}{', ' + _timeout['why'] if _timeout['why'] else ''}); "
            f"another rank is stalled or far slower: raise {TIMEOUT_SETTING}") from None


def _destroy() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def shutdown() -> None:
    """Wait for every rank, then leave the process group (call at the end of a launch)."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def barrier() -> None:
    if world_size() > 1:
        with collective("barrier"):
            dist.barrier()


@dataclass(frozen=True)
class Shards:
    """This rank's share of an evaluation (``esopt.evaluator.evaluate(shards=...)``): a
    contiguous block of the problems, and the all-gather that puts the blocks back together."""

    rank: int
    world: int

    def block(self, n: int) -> tuple[int, int]:
        """``[lo, hi)`` of ``n`` problems for this rank: blocks in rank order, sizes differing by
        at most one (the first ``n % world`` ranks take one more)."""
        base, extra = divmod(int(n), self.world)
        lo = self.rank * base + min(self.rank, extra)
        return lo, lo + base + (1 if self.rank < extra else 0)

    def gather(self, obj) -> list:
        """Every rank's ``obj``, in rank order (all_gather_object)."""
        out: list = [None] * self.world
        with collective("gathering an evaluation's results"):
            dist.all_gather_object(out, obj)
        return out


def shards() -> Shards | None:
    """This process's share of evaluations when running as several ranks; None when alone."""
    return Shards(rank(), world_size()) if world_size() > 1 else None


def agree(flag: bool) -> bool:
    """Rank 0's ``flag`` on every rank (a broadcast): e.g. whether to evaluate the base model,
    or whether the trial was pruned; ``flag`` itself when alone."""
    if world_size() == 1:
        return bool(flag)
    t = torch.tensor([1 if flag else 0], dtype=torch.int64, device=_device())
    with collective("agreeing on rank 0's decision"):
        dist.broadcast(t, src=0)
    return bool(t.item())


def full_state(model) -> dict | None:
    """The whole state dict of an FSDP2-sharded ``model``, in the masters' dtype, on rank 0's
    CPU (every rank calls; the others get ``{}``); None when nothing is sharded (the model's own
    state dict is whole). Through torch's ``get_model_state_dict(full_state_dict=True)``."""
    from torch.distributed.tensor import DTensor

    if not any(isinstance(p, DTensor) for p in model.parameters()):
        return None
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    with collective("gathering the sharded model's weights"):
        return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def from_rank0(obj):
    """Rank 0's ``obj`` (any picklable value) on every rank; ``obj`` itself when alone."""
    if world_size() == 1:
        return obj
    box = [obj]
    with collective("taking rank 0's decision"):
        dist.broadcast_object_list(box, src=0)
    return box[0]


def sum_ranks(values, op: str = "sum") -> list[float]:
    """Element-wise sum (``op="max"``: maximum) of ``values`` over the ranks, as float64;
    ``values`` themselves when alone (exact for counts below 2**53)."""
    if world_size() == 1:
        return [float(v) for v in values]
    t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=_device())
    with collective("summing counts over the ranks"):
        dist.all_reduce(t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
    return t.tolist()


def any_rank(flag: bool) -> bool:
    """Whether ``flag`` is true on any rank (one all-reduce when distributed)."""
    if world_size() < 2:
        return bool(flag)
    t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=_device())
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def _device() -> torch.device:
    if world_size() > 1 and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def my_members(pop: int, world: int, rank_: int, antithetic: bool = False) -> list[int]:
    """Member indices scored by ``rank_``: round robin (antithetic pairs stay together)."""
    if antithetic:
        return [i for j in range(pop // 2) if j % world == rank_ for i in (2 * j, 2 * j + 1)]
    return [i for i in range(pop) if i % world == rank_]


def gather_members(mine, rewards_local, success_local, tokens_local: int, pop: int, n_prompts: int):
    """Combine every rank's members into full ``rewards [pop]``, ``success [pop, P]`` and the
    total token count. Each rank fills its own rows of a zero table and the tables are summed
    (all_reduce): every entry has one non-zero contributor, so the sum is exact."""
    table = np.zeros((pop, 1 + n_prompts), dtype=np.float64)
    if len(mine):
        table[mine, 0] = rewards_local
        table[mine, 1:] = success_local
    if world_size() == 1:
        return table[:, 0], table[:, 1:], int(tokens_local)
    t = torch.from_numpy(table).to(_device())
    tok = torch.tensor([float(tokens_local)], dtype=torch.float64, device=_device())
    with collective("gathering the members' rewards"):
        dist.all_reduce(t)
        dist.all_reduce(tok)
    table = t.cpu().numpy()
    return table[:, 0], table[:, 1:], int(tok.item())


def check_same_weights(params, where: str = "") -> int:
    """All ranks must hold bitwise-identical weights (esopt.noise.checksum of ``params``);
    raise RuntimeError naming the checksums if not. Returns the local checksum."""
    return check_same(noise.checksum(params), where)


def check_same(c: int, where: str = "") -> int:
    """Compare one integer checksum across ranks (all_reduce MIN and MAX)."""
    if world_size() > 1:
        lo = torch.tensor([c], dtype=torch.int64, device=_device())
        hi = lo.clone()
        with collective(f"comparing weights across ranks at {where}"):
            dist.all_reduce(lo, op=dist.ReduceOp.MIN)
            dist.all_reduce(hi, op=dist.ReduceOp.MAX)
        if int(lo.item()) != int(hi.item()):
            raise RuntimeError(f"weights differ across ranks at {where}: checksums {int(lo)}..{int(hi)}")
    return c
