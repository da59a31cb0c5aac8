"""The exceptions every layer shares.

- :class:`ConfigError`: bad input (a config value, a data file, a model path). Its message is
  one line; the entry points print ``esopt: error: <message>`` and exit 2, before any run starts.
- :class:`Pruned`: raised by a run's evaluation when its Optuna pruner stops it.
- :class:`NonFinite`: raised by an algorithm when rewards or weights stop being finite.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A user error in the configuration or input data; its message is one line."""


class Pruned(Exception):
    """The run was stopped by its pruner at an evaluation (recorded as ``pruned``); ``reason``
    says why (statistic, value, threshold, reference, step), recorded as ``pruning``."""

    def __init__(self, message: str, reason: dict | None = None):
        super().__init__(message)
        self.reason = reason


class NonFinite(RuntimeError):
    """Rewards or weights stopped being finite (the run is recorded as ``failed``)."""
