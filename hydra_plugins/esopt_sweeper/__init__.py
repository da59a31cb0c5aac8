"""esopt's Hydra sweepers (found by Hydra through the ``hydra_plugins`` namespace package).

- ``hydra/sweeper=esopt`` (esopt's default): Hydra's grid expansion, plus: every job's config is
  composed and validated before anything is launched, ``sweep.dry_run=true`` prints the grid,
  completed runs and a token estimate, completed runs are not dispatched again, jobs are grouped
  by their scheduler request (the model's ``resources``), and a final table of runs is printed.
- ``hydra/sweeper=optuna``: Optuna 5 search (TPE by default) over ranges in
  ``hydra.sweeper.params``, in parallel batches through the configured launcher, with pruning
  inside the runs (``tuning.pruner``).

Only light imports at module level: Hydra imports every plugin module at each start.
"""
