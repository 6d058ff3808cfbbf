import pytest

from lightning_streamprof.profiling.schedule import Phase, WindowSchedule


def test_windows_on_grid():
    s = WindowSchedule(skip_first=10, warmup=2, active=3, every=20, repeat=0)
    ws = s.windows_until(60)
    assert [(w.warmup_start, w.start, w.stop) for w in ws] == [(10, 12, 15), (30, 32, 35), (50, 52, 55)]
    w = ws[0]
    assert [w.phase(i) for i in (9, 10, 11, 12, 14, 15)] == [
        Phase.IDLE, Phase.WARMUP, Phase.WARMUP, Phase.ACTIVE, Phase.ACTIVE, Phase.IDLE,
    ]


def test_one_window_and_repeat_limit():
    assert len(WindowSchedule(skip_first=0, warmup=0, active=2, every=0).windows_until(1000)) == 1
    assert len(WindowSchedule(skip_first=0, warmup=1, active=2, every=10, repeat=4).windows_until(1000)) == 4
    assert WindowSchedule(every=0).window(1) is None


def test_deferral_moves_to_next_grid_point():
    s = WindowSchedule(skip_first=10, warmup=2, active=3, every=20)
    assert s.window(1).start == 32
    w = s.window(1, not_before=33)  # warm-up must not start before step 33
    assert (w.warmup_start, w.start) == (50, 52)
    once = WindowSchedule(skip_first=5, warmup=1, active=2, every=0)
    assert once.window(0, not_before=40).warmup_start == 40


@pytest.mark.parametrize(
    "kwargs", [dict(active=0), dict(warmup=-1), dict(every=3, warmup=2, active=3), dict(skip_first=-2)]
)
def test_rejects_bad_schedules(kwargs):
    with pytest.raises(ValueError, match="WindowSchedule"):
        WindowSchedule(**kwargs)
