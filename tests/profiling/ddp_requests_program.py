"""A 2-process DDP (gloo) fit asked for windows off the schedule, run by test_on_demand_ddp.py:
``ddp_requests_program.py OUTDIR signal|slowdown``. ``signal``: rank 0 gets SIGUSR2 at step ASK_AT; ``slowdown``: rank
1's steps take SLEEP seconds more from step SLOW_FROM. Each rank prints one JSON line of its windows."""

import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import lightning as L  # noqa: E402
from helpers import TinyModel  # noqa: E402
from lightning.pytorch.demos.boring_classes import RandomDataset  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from lightning_streamprof import StreamProfiler  # noqa: E402

ASK_AT, SLOW_FROM, SLEEP = 150, 250, 0.06


class Long(TinyModel):
    def train_dataloader(self):
        return DataLoader(RandomDataset(32, 4000), batch_size=1)


class Ask(L.Callback):
    def __init__(self, mode):
        self.mode = mode

    def on_train_batch_end(self, trainer, *args):
        time.sleep(0.003)
        step = trainer.global_step
        if self.mode == "signal" and trainer.global_rank == 0 and step == ASK_AT:
            os.kill(os.getpid(), signal.SIGUSR2)
        if self.mode == "slowdown" and trainer.global_rank == 1 and step >= SLOW_FROM:
            time.sleep(SLEEP)


if __name__ == "__main__":
    out, mode = sys.argv[1], sys.argv[2]
    profiler = StreamProfiler(dirpath=out, skip_first=10 if mode == "slowdown" else 10_000, warmup=1, active=3,
                              every=0, max_overhead=None, request_poll=0.05,
                              # rank 1's steps become about 15 times longer: a factor of 3 leaves the 2-core host's jitter
                              # of two processes' 4 ms steps out of it, even while the baseline was taken on a busy host
                              slowdown=3.0 if mode == "slowdown" else False)
    trainer = L.Trainer(max_steps=480 if mode == "slowdown" else 320, accelerator="cpu", devices=2, strategy="ddp",
                        profiler=profiler, default_root_dir=out, limit_val_batches=0, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, logger=False,
                        callbacks=[Ask(mode)])
    trainer.fit(Long())
    triggers = profiler._profiled.recorder.triggers
    windows = [{"window": w.window, "first_step": w.first_step,
                "reason": triggers[w.window].reason if w.window in triggers else None,
                "via": triggers[w.window].via if w.window in triggers else None} for w in profiler.windows]
    stragglers = {str(w.first_step): w.stragglers for d in profiler.distributed for w in d.windows}
    print("RESULT " + json.dumps({"rank": trainer.global_rank, "windows": windows, "stragglers": stragglers,
                                  "summary": profiler.summary() if trainer.global_rank == 0 else ""}))
