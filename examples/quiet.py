"""Keep the examples' output to what matters: Lightning's start-up banners, tips and the warnings these examples
trigger on purpose are left out (the profiler's summary, the progress bar and real problems stay)."""

from __future__ import annotations

import logging
import warnings

#: warnings the examples cause on purpose, or that say nothing the user can act on
_EXPECTED = (
    r".*module\(s\) in eval mode.*",  # the frozen backbone is in eval mode by design
    r".*isinstance\(treespec, LeafSpec\)` is deprecated.*",  # Lightning's use of a torch API, not ours to fix
    r".*does not have many workers.*",  # the small CPU runs use few workers on purpose
    r".*smaller than the logging interval.*",  # short runs
    r".*overridden `on_after_batch_transfer` in `LightningModule` but have passed in a `LightningDataModule`.*",
)


def quiet_lightning() -> None:
    """Lightning's informational lines (GPU/TPU available, tips, seed) off; the examples' expected warnings off."""
    # both distributions: importing StreamProfiler registers its name in each installed one
    for package in ("lightning.pytorch", "lightning.fabric", "pytorch_lightning", "lightning_fabric"):
        for module in ("utilities.rank_zero", "utilities.seed", "accelerators.cuda"):
            logging.getLogger(f"{package}.{module}").setLevel(logging.WARNING)
    for message in _EXPECTED:
        warnings.filterwarnings("ignore", message=message)
