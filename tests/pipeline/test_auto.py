import time

from lightning_streamprof.pipeline.auto import AutoSwitch


def drive(switch, serial_s, pipelined_s, steps):
    decisions = []
    pipelined = False
    for _ in range(steps):
        time.sleep(pipelined_s if pipelined else serial_s)
        pipelined = switch.step()
        decisions.append(pipelined)
    return decisions


def test_keeps_pipelining_when_faster_and_serial_when_not():
    fast = AutoSwitch(warmup=2, trial=6, recheck=50, settle=1)
    drive(fast, serial_s=0.004, pipelined_s=0.002, steps=40)
    assert fast.pipelined and fast.history[0].gain > 0.5
    slow = AutoSwitch(warmup=2, trial=6, recheck=50, settle=1)
    drive(slow, serial_s=0.002, pipelined_s=0.004, steps=40)
    assert not slow.pipelined and slow.history[0].gain < 0


def test_trials_alternate_and_recheck():
    switch = AutoSwitch(warmup=1, trial=3, recheck=5, settle=1)
    decisions = drive(switch, 0.001, 0.001, 1 + 12 + 5 + 12)
    # warm-up step, then serial / pipelined / serial / pipelined trials of 3 steps, then 5 steps of the choice
    assert decisions[:13] == [False] * 3 + [True] * 3 + [False] * 3 + [True] * 3 + [decisions[12]]
    assert len(switch.history) == 2
