"""Bounded waits: a call that hangs, and a rank that never reaches the gather."""

import threading
import time

import pytest
import torch.distributed as dist

from lightning_streamprof.deadline import DeadlineExceeded, call_with_deadline, io_timeout, store_gather


def test_a_hanging_call_is_abandoned_after_its_deadline():
    gate = threading.Event()
    start = time.perf_counter()
    with pytest.raises(DeadlineExceeded, match="the store did not answer within 0.2 s"):
        call_with_deadline(gate.wait, 0.2, "the store")
    assert time.perf_counter() - start < 1
    gate.set()
    assert call_with_deadline(lambda: 42, 1, "x") == 42
    with pytest.raises(KeyError):
        call_with_deadline(lambda: {}["missing"], 1, "x")


def test_io_timeout_from_the_environment(monkeypatch):
    monkeypatch.setenv("STREAMPROF_IO_TIMEOUT", "2.5")
    assert io_timeout() == 2.5
    monkeypatch.setenv("STREAMPROF_IO_TIMEOUT", "soon")
    assert io_timeout() == 30.0


def test_a_rank_that_never_reaches_the_gather():
    """Ranks 0 and 2 gather; rank 1 never arrives: both get what arrived within the deadline and the missing rank,
    over a real ``torch.distributed`` store."""
    store = dist.HashStore()
    out = {}

    def rank(r):
        out[r] = store_gather(store, "streamprof/w0", f"rank{r}".encode(), r, range(3), seconds=0.5)

    start = time.perf_counter()
    threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert time.perf_counter() - start < 2
    for r in (0, 2):
        got, missing = out[r]
        assert got == {0: b"rank0", 2: b"rank2"} and missing == [1]


def test_every_rank_arrives():
    store = dist.HashStore()
    out = {}
    threads = [threading.Thread(target=lambda r=r: out.__setitem__(
        r, store_gather(store, "k", bytes([r]), r, range(4), seconds=5))) for r in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert all(out[r] == ({i: bytes([i]) for i in range(4)}, []) for r in range(4))
