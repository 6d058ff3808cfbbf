import lightning as L
import torch
from gpu_augmentation import Classifier, RandomImages
from torch.utils.data import DataLoader

from lightning_streamprof import StreamPipeline


class Losses(L.Callback):
    def __init__(self):
        self.values = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.values.append(outputs["loss"].item())


def train(mode):
    torch.manual_seed(0)
    losses = Losses()
    callbacks = [losses] + ([StreamPipeline(backbone=False, mode=mode)] if mode else [])
    trainer = L.Trainer(accelerator="cpu", max_steps=8, callbacks=callbacks, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    model = Classifier(image_size=16)
    trainer.fit(model, DataLoader(RandomImages(32, 16), batch_size=4))
    return losses.values, model


def test_augmentation_in_hook_pipelined_equals_serial():
    serial, m_serial = train(None)
    piped, m_piped = train("on")
    assert len(piped) == len(serial) == 8
    assert piped == serial  # the transforms draw from the module's own generator: identical augmentation
    for a, b in zip(m_piped.parameters(), m_serial.parameters()):
        torch.testing.assert_close(a, b)


def test_profiler_summary_shows_the_pipeline_report(tmp_path):
    from lightning_streamprof import StreamProfiler

    profiler = StreamProfiler(dirpath=tmp_path, skip_first=2, warmup=1, active=2, every=0)
    trainer = L.Trainer(accelerator="cpu", max_steps=6, profiler=profiler, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[StreamPipeline(backbone=False, mode="on")])
    trainer.fit(Classifier(image_size=16), DataLoader(RandomImages(32, 16), batch_size=4))
    text = profiler.summary()
    assert "window 0" in text and "StreamPipeline (on, no CUDA device" in text and "6 batches staged ahead" in text


def test_profiled_window_records_the_staging_thread(tmp_path):
    """With staging on a thread, the profiler's trace has the next batch's hook on the staging thread's own
    track, inside the training step's time, and the run ends with no profiling warning."""
    import gzip
    import json
    import warnings

    from lightning_streamprof import StreamProfiler

    profiler = StreamProfiler(dirpath=tmp_path, skip_first=2, warmup=1, active=3, every=0)
    trainer = L.Trainer(accelerator="cpu", max_steps=8, profiler=profiler, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[StreamPipeline(backbone=False, mode="on", staging_thread=True)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(Classifier(image_size=16), DataLoader(RandomImages(32, 16), batch_size=4))
    assert not [w for w in caught if "StreamProfiler" in str(w.message)]
    (trace,) = tmp_path.rglob("*.pt.trace.json.gz")
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    steps = [e for e in events if e.get("name", "").startswith("ProfilerStep#")]
    staged = [e for e in events if e.get("name") == "[pl][profile][StreamPipeline].stage_on_thread"]
    hooks = [e for e in events if e.get("name") == "[pl][profile][LightningModule]Classifier.on_after_batch_transfer"]
    assert len(steps) == 3 and staged and hooks
    main_tid = steps[0]["tid"]
    assert {e["tid"] for e in staged} == {e["tid"] for e in hooks} != {main_tid}
