from types import SimpleNamespace

from lightning_streamprof import StreamPipeline
from lightning_streamprof.pipeline.auto import AutoSwitch, Measurement


class Recorder:
    def __init__(self):
        self.logged = []

    def log_metrics(self, metrics, step):
        self.logged.append((step, metrics))


def test_each_auto_decision_is_logged_with_its_gain():
    pipe = StreamPipeline(mode="auto")
    logger = Recorder()
    pipe._trainer = SimpleNamespace(loggers=[logger], global_step=42)
    pipe._auto = AutoSwitch(warmup=1, trial=2, recheck=100, settle=0)
    for _ in range(1 + 4 * 2):
        pipe._want_pipelining()
    assert len(pipe._auto.history) == 1
    step, metrics = logger.logged[-1]
    assert step == 42 and set(metrics) == {"streampipe/pipelined", "streampipe/gain", "streampipe/threaded"}
    assert metrics["streampipe/gain"] == pipe._auto.history[0].gain
    assert Measurement({"serial": 10.0, "pipelined": 8.0}, "pipelined").gain == 0.25
