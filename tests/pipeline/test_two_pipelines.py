"""Two StreamPipeline callbacks in one Trainer (a config's, plus one added with ``--trainer.callbacks+=``) are
refused at setup with one clear error (both used to run, one of them serving nothing, with no word)."""

import lightning as L
import pytest
from pipeline_models import Net, loader

from lightning_streamprof import StreamPipeline


def test_two_pipelines_are_refused_at_setup():
    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=2, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[StreamPipeline(mode="on"), StreamPipeline(mode="auto")])
    with pytest.raises(ValueError, match=r"StreamPipeline: the Trainer has 2 StreamPipeline callbacks; .* Keep one"):
        trainer.fit(Net(), train_dataloaders=loader("sized"))
    assert trainer.global_step == 0
