"""The top layer: command-line entry points (thin: parse, call the layers below, print).

    python -m esopt.sweep      (esopt.cli.sweep)      runs and grids (Hydra)
    python -m esopt.evaluate   (esopt.cli.evaluate)   one model on a task split (Hydra)
    python -m esopt.aggregate  (esopt.cli.aggregate)  a sweep's tables, trend, claims and page
    python -m esopt.analyze    (esopt.cli.analyze)    sparsity, drift, forgetting, connectivity of runs
    python -m esopt.design     (esopt.cli.design)     a study design: a grid's power per claim and cost,
                                                      before it runs (was esopt.plan, kept for a release)
    python -m esopt.cli.pretrain                      pretraining of the tiny family
"""
