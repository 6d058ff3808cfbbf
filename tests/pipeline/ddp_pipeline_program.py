"""2-process DDP (gloo) fit with or without StreamPipeline; each rank writes its batch checksums, losses and final
head weights (and auto's measurements) to ``<out>/rank<R>.json``.

    ddp_pipeline_program.py on|off|thread|auto OUT_DIR [EPOCHS]

``auto`` measures on CPU here (it does so only with CUDA otherwise), to test that the ranks decide alike.
"""

import json
import os
import sys

sys.path[:0] = [os.path.dirname(os.path.abspath(__file__)), os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]

import lightning as L  # noqa: E402
from pipeline_models import Net, loader  # noqa: E402
from program_exit import leave_after_distributed_run  # noqa: E402

from lightning_streamprof import StreamPipeline  # noqa: E402
from lightning_streamprof.pipeline.stager import Stager  # noqa: E402

if __name__ == "__main__":
    mode, out = sys.argv[1], sys.argv[2]
    epochs = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    net = Net()
    if mode == "auto":
        Stager.overlaps = True  # as if staging ran beside the step, as with CUDA streams
        callbacks = [StreamPipeline(mode="auto", backbone="backbone", staging_thread=False, warmup=1, trial=3)]
    else:
        callbacks = [StreamPipeline(mode="on", backbone="backbone", staging_thread=mode == "thread")] if mode != "off" else []
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=epochs, callbacks=callbacks, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(net, loader("sized"))
    staged = callbacks[0].staged_batches if callbacks else 0
    weights = [round(float(v), 6) for v in net.head[1].weight.flatten()[:8]]
    with open(os.path.join(out, f"rank{trainer.global_rank}.json"), "w") as f:
        json.dump({"rank": trainer.global_rank, "seen": net.seen, "losses": net.losses, "weights": weights,
                   "steps": trainer.global_step, "staged": staged,
                   "auto": [{"ms": {w.key: v for w, v in m.ms.items()}, "choice": m.choice.key} for m in callbacks[0].rounds] if mode == "auto" else None},
                  f)
    leave_after_distributed_run()
