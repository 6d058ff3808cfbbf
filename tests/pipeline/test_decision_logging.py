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
    assert step == 42 and set(metrics) == {"streampipe/pipelined", "streampipe/gain", "streampipe/threaded",
                                        "streampipe/graphed"}
    assert metrics["streampipe/gain"] == pipe._auto.history[0].gain
    assert Measurement({"serial": 10.0, "pipelined": 8.0}, "pipelined").gain == 0.25


def test_a_revert_is_logged_with_the_steady_state_loss_and_reported():
    import time

    pipe = StreamPipeline(mode="auto")
    logger = Recorder()
    pipe._trainer = SimpleNamespace(loggers=[logger], global_step=7)
    pipe._auto = AutoSwitch(warmup=1, trial=3, recheck=100, settle=1, watch=5)
    pipe._auto.history.append(Measurement({"serial": 1.0, "pipelined": 0.5}, "pipelined"))
    pipe._auto._phase, pipe._auto.choice, pipe._auto._left = -1, "pipelined", 100
    pipe._auto._watch_left = pipe._auto.watch + 1
    for _ in range(1 + 5):
        time.sleep(0.003)  # 3 ms per step against serial's 1 ms
        pipe._want_pipelining()
    assert pipe._auto.choice == "serial" and len(pipe._auto.reverts) == 1
    step, metrics = logger.logged[-1]
    assert metrics["streampipe/pipelined"] == 0.0 and metrics["streampipe/gain"] < -0.5
    assert "steady state: pipelined" in pipe.report() and "-> serial until the next trials" in pipe.report()
