"""LightningCLI entry point for the two seed workloads, each a LightningModule and a DataModule with a YAML config.

    python examples/train.py fit --config examples/configs/frozen_backbone.yaml
    python examples/train.py fit --config examples/configs/gpu_augmentation.yaml
    python examples/train.py fit --config examples/configs/frozen_backbone.yaml \\
        --trainer.profiler=streamprof --trainer.profiler.every=10 --trainer.profiler.with_stack=true

Small and fast on CPU by default, full size on a GPU (the data modules' ``None`` sizes). The import of
``StreamProfiler`` lets LightningCLI take ``--trainer.profiler=streamprof`` with ``--trainer.profiler.<arg>=...``.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from lightning.pytorch.cli import LightningCLI  # noqa: E402
from quiet import quiet_lightning  # noqa: E402

from lightning_streamprof import StreamProfiler  # noqa: E402, F401 - makes the short name take arguments


def main(args: list[str] | None = None) -> LightningCLI:
    quiet_lightning()
    return LightningCLI(subclass_mode_model=True, subclass_mode_data=True, save_config_kwargs={"overwrite": True},
                        args=args)


if __name__ == "__main__":
    main()
