"""``python -m esopt.analyze sparsity|drift|forgetting|connectivity <run-dir> ...``: the mechanism analyses
of trained runs (``esopt.study.analyses``), printed as tables and written beside the run."""

from __future__ import annotations

import argparse
import sys

from esopt.cli.common import Parser, quiet
from esopt.core.errors import ConfigError
from esopt.core.store import atomic_write_json
from esopt.study.analyses import (CONTROL_FRACTIONS, DEFAULT_FRACTIONS, INTERIOR, MODES, EvalOpts, compare_drift,
                                 connectivity, drift, forgetting, format_drift, partners, sparsity)


def _floats(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def _names(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m esopt.analyze", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="analysis", required=True, parser_class=Parser)

    def eval_args(sp, greedy_default: bool):
        sp.add_argument("--split", default="heldout", help="task split evaluated (default heldout)")
        sp.add_argument("--problems", type=int, default=64, help="problems evaluated (default 64)")
        sp.add_argument("--samples", type=int, default=8, help="samples per problem; K = samples (default 8)")
        sp.add_argument("--temperature", type=float, default=None, help="default: the run's eval.temperature")
        sp.add_argument("--top-p", type=float, default=None, help="default: the run's eval.top_p")
        sp.add_argument("--max-new-tokens", type=int, default=None, help="default: the run's / the task's")
        sp.add_argument("--seed", type=int, default=None, help="evaluation seed (default: the run's eval.seed)")
        sp.add_argument("--greedy", action=argparse.BooleanOptionalAction, default=greedy_default,
                        help="also measure greedy accuracy")
        sp.add_argument("--bootstrap", type=int, default=1000, help="bootstrap replicates (default 1000)")
        sp.add_argument("--base", default=None, help="base model name or directory (default: the run's model)")
        sp.add_argument("--device", default=None, help="cpu | cuda (default: the run's engine.device)")
        sp.add_argument("--no-write", action="store_true", help="print only; do not write the JSON")

    s = sub.add_parser("sparsity", help="functional sparsity of the update (sparsity.json)")
    s.add_argument("run_dir")
    s.add_argument("--fractions", type=_floats, default=list(DEFAULT_FRACTIONS),
                   help="keep fractions of the nonzero update entries (default "
                        + ",".join(f"{f:g}" for f in DEFAULT_FRACTIONS) + ")")
    s.add_argument("--modes", type=_names, default=list(MODES),
                   help="global,per_tensor,smallest,random,equal_norm (default all); random and equal_norm "
                        "(random masks of the same size; equal_norm rescaled to the top-k update's norm) "
                        "only at --control-fractions")
    s.add_argument("--control-fractions", type=_floats, default=list(CONTROL_FRACTIONS),
                   help="keep fractions of the random / equal_norm controls (default "
                        + ",".join(f"{f:g}" for f in CONTROL_FRACTIONS) + "; each is one evaluation)")
    s.add_argument("--mask-seed", type=int, default=None, help="seed of the random mask (default: the run's seed)")
    eval_args(s, greedy_default=False)

    d = sub.add_parser("drift", help="relative L2 drift by module type and layer (drift.json)")
    d.add_argument("run_dirs", nargs="+", metavar="run_dir", help="one or more runs (side by side)")
    d.add_argument("--top", type=float, default=0.01, help="fraction of largest updates located (default 0.01)")
    d.add_argument("--base", default=None, help="base model name or directory (default: each run's model)")
    d.add_argument("--device", default="cpu")
    d.add_argument("--out", default=None, help="also write the side-by-side comparison JSON here")
    d.add_argument("--no-write", action="store_true", help="print only; do not write drift.json")

    f = sub.add_parser("forgetting", help="change on tasks not trained on (forgetting.json)")
    f.add_argument("run_dir")
    f.add_argument("--tasks", type=_names, default=None,
                   help="held-out tasks (default tiny: addition,compare,reverse; others: gsm8k)")
    eval_args(f, greedy_default=True)

    c = sub.add_parser("connectivity", help="Pass@1 between an ES and a GRPO model; their updates' cosine "
                                            "(connectivity.json in the ES run)")
    c.add_argument("run_dirs", nargs="*", metavar="run_dir", help="an ES run and a GRPO run from the same base model")
    c.add_argument("--sweep", default=None, help="every ES/GRPO seed pair of this sweep directory instead")
    c.add_argument("--ts", type=_floats, default=list(INTERIOR),
                   help="interior interpolation points (default 0.25,0.5,0.75; 0 and 1 are always evaluated)")
    eval_args(c, greedy_default=False)
    return p


def _eval_opts(a) -> EvalOpts:
    return EvalOpts(split=a.split, problems=a.problems, samples=a.samples, temperature=a.temperature,
                    top_p=a.top_p, max_new_tokens=a.max_new_tokens, seed=a.seed, greedy=a.greedy,
                    bootstrap=a.bootstrap)


def _fmt(v) -> str:
    return "-" if v is None else f"{v:+.3f}" if isinstance(v, float) else str(v)


def main(argv: list[str] | None = None) -> int:
    quiet()
    a = parser().parse_args(argv)
    say = lambda s: print(s, file=sys.stderr)  # noqa: E731
    try:
        if a.analysis == "sparsity":
            r = sparsity(a.run_dir, fractions=a.fractions, modes=a.modes, control_fractions=a.control_fractions,
                         mask_seed=a.mask_seed, base=a.base, device=a.device, opts=_eval_opts(a),
                         write=not a.no_write, log=say)
            print(f"base pass@1 {r['base_score']['pass@1']:.4f}, trained {r['trained_score']['pass@1']:.4f} "
                  f"({r['nnz']} of {r['n_params']} entries changed)")
            print(f"{'mode':<11}{'keep':>6}{'pass@1':>9}{'pass@K':>9}{'share@1':>9}  95% CI")
            for c in r["curves"]:
                ci = c["share_pass@1_ci"]
                print(f"{c['mode']:<11}{c['keep']:>6g}{c['pass@1']:>9.4f}{c['pass@K']:>9.4f}"
                      f"{_fmt(c['share_pass@1']):>9}  {'' if ci is None else f'[{ci[0]:+.3f}, {ci[1]:+.3f}]'}")
        elif a.analysis == "drift":
            rs = [drift(rd, top=a.top, base=a.base, device=a.device, write=not a.no_write) for rd in a.run_dirs]
            cmp = compare_drift(rs)
            print(format_drift(cmp))
            if rs[0]["tied_embeddings"]:
                print("note: lm_head is tied to the embeddings (counted under embeddings)")
            if a.out:
                atomic_write_json(a.out, cmp)
        elif a.analysis == "connectivity":
            if bool(a.sweep) == bool(a.run_dirs) or (a.run_dirs and len(a.run_dirs) != 2):
                raise ConfigError("connectivity takes an ES run and a GRPO run, or --sweep <sweep-dir>")
            if a.sweep:
                from esopt.study import tables

                pairs = partners(tables.find_runs_dir(a.sweep))
                if not pairs:
                    raise ConfigError(f"no ES/GRPO seed pair with saved models in {a.sweep}")
            else:
                pairs = [tuple(a.run_dirs)]
            print(f"{'ES run':<28}{'GRPO run':<28}{'ES@1':>7}{'GRPO@1':>8}{'barrier':>9}{'at t':>6}{'cosine':>8}")
            for es, grpo in pairs:
                r = connectivity(es, grpo, ts=a.ts, base=a.base, device=a.device, opts=_eval_opts(a),
                                 write=not a.no_write, log=say)
                cos = "-" if r["cosine"] is None else f"{r['cosine']:+.3f}"
                print(f"{str(es)[-27:]:<28}{str(grpo)[-27:]:<28}{r['es_pass@1']:>7.3f}{r['grpo_pass@1']:>8.3f}"
                      f"{r['barrier']:>+9.3f}{r['barrier_t']:>6g}{cos:>8}")
        else:
            r = forgetting(a.run_dir, tasks=a.tasks, base=a.base, device=a.device, opts=_eval_opts(a),
                           write=not a.no_write, log=say)
            print(f"{'task':<12}{'base@1':>8}{'trained@1':>11}{'change':>9}  95% CI")
            for t, v in r["tasks"].items():
                ci = v["change"]["pass@1_ci"]
                print(f"{t:<12}{v['base']['pass@1']:>8.4f}{v['trained']['pass@1']:>11.4f}"
                      f"{v['change']['pass@1']:>+9.4f}  [{ci[0]:+.4f}, {ci[1]:+.4f}]")
    except ConfigError as e:
        print(f"esopt: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
