"""The ``models`` benchmark's settings (:class:`ModelsConfig`), its model names, and the error
a pair that computes different things raises: what the harness and the runner both read."""

from __future__ import annotations

from dataclasses import dataclass

#: The models, in table order.
MODELS = (
    "lsq-mlp",
    "pact-mlp",
    "binarynet-mlp",
    "twn-mlp",
    "snn",
    "snn-lif",
    "stochastic-mlp",
    "vq-vae",
    "fsq-ae",
    "moe",
    "l0-mlp",
)


@dataclass(frozen=True)
class ModelsConfig:
    """Settings of the ``models`` benchmark.

    Attributes:
        models: which of :data:`MODELS` to run.
        batch: rows per training step.
        time_steps: the spiking network's simulation length.
        rounds: interleaved timing rounds.
        min_run_time: seconds of calls per candidate and round (``blocked_autorange``).
        budget_s: wall seconds of timing rounds per model (at least 3 rounds; ``None``:
            always ``rounds``), so that a loaded machine does not stretch the task.
    """

    models: tuple[str, ...] = MODELS
    batch: int = 64
    time_steps: int = 25
    rounds: int = 15
    min_run_time: float = 0.2
    budget_s: float | None = None


def default_config(quick: bool) -> ModelsConfig:
    """The full setting, or the ``--quick`` one: fewer and shorter rounds."""
    if quick:
        return ModelsConfig(rounds=7, min_run_time=0.1, budget_s=2.5)
    return ModelsConfig()


class ModelCheckError(AssertionError):
    """The two versions of a model compute different things."""
