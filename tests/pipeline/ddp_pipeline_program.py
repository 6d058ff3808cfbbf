"""2-process DDP (gloo) fit with or without StreamPipeline; prints rank, batch checksums and final head weights.

    ddp_pipeline_program.py on|off
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import lightning as L  # noqa: E402
from pipeline_models import Net, loader  # noqa: E402

from lightning_streamprof import StreamPipeline  # noqa: E402

if __name__ == "__main__":
    mode = sys.argv[1]
    net = Net()
    callbacks = [StreamPipeline(mode="on", backbone="backbone")] if mode == "on" else []
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=2, callbacks=callbacks, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(net, loader("sized"))
    staged = callbacks[0].staged_batches if callbacks else 0
    weights = [round(float(v), 6) for v in net.head[1].weight.flatten()[:8]]
    print("RESULT " + json.dumps({"rank": trainer.global_rank, "seen": net.seen, "losses": net.losses,
                                  "weights": weights, "steps": trainer.global_step, "staged": staged}))
