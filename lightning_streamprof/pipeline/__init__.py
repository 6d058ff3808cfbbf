"""StreamPipeline: overlap the next batch's copy, augmentation and frozen-backbone forward with training."""

from lightning_streamprof.pipeline.callback import StreamPipeline

__all__ = ["StreamPipeline"]
