"""The frozen backbone's forward captured as CUDA graphs, one per input shape, dtype and autocast state."""

from __future__ import annotations

import contextlib
import warnings
from typing import Any, Callable

import torch


def _autocast_state(device: torch.device) -> torch.dtype | None:
    """The autocast dtype in force for ``device`` (``None``: autocast is off)."""
    kind = device.type
    return torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else None


class GraphedForward:
    """Replays the backbone's forward as a CUDA graph per input (shape, dtype, device, autocast dtype).

    Replays run on the current (side) stream; the output is cloned so that the next replay cannot overwrite a
    result the training stream still reads. Under mixed precision the capture runs with autocast active and its
    weight-cast cache off (graph capture needs each cast inside the graph), and each new graph's output is
    checked against the eager forward once before it is used. After ``max_graphs`` shapes, new shapes run
    eagerly; a forward that cannot be captured (a host synchronisation, a CPU operation), or whose graph
    differs from eager, runs eagerly from then on, with one warning (``failure`` keeps the reason).

    Where ``defer()`` is true (on the staging thread) a new shape runs eagerly and is captured by the next
    :meth:`capture_pending`, called on the training thread while no other thread stages: a capture marks the
    device's default CUDA generator as capturing, and a random draw on another thread meanwhile would fail.
    """

    def __init__(self, forward: Callable[..., Any], max_graphs: int = 2, warmup: int = 3,
                 defer: Callable[[], bool] = lambda: False) -> None:
        self.forward = forward
        self.max_graphs = max_graphs
        self.warmup = warmup
        self.defer = defer
        self._graphs: dict[tuple, tuple[torch.cuda.CUDAGraph, torch.Tensor, Any]] = {}
        self._pending: dict[tuple, tuple[torch.Tensor, torch.dtype | None]] = {}
        self.replays = 0
        self.eager = 0
        self.failure: str | None = None

    def __call__(self, x: torch.Tensor) -> Any:
        amp = _autocast_state(x.device)
        key = (tuple(x.shape), x.dtype, x.device, amp)
        entry = self._graphs.get(key)
        if entry is None:
            if self._may_capture(x):
                if self.defer():
                    self._pending.setdefault(key, (x, amp))
                else:
                    entry = self._try_capture(key, x, amp)
            if entry is None:
                self.eager += 1
                with torch.no_grad():
                    return self.forward(x)
        graph, static_in, static_out = entry
        static_in.copy_(x)
        graph.replay()
        self.replays += 1
        return _clone(static_out)

    def prepare(self, x: torch.Tensor) -> None:
        """Capture the graph for ``x``'s shape now (on the current stream), so that its first use replays."""
        amp = _autocast_state(x.device)
        key = (tuple(x.shape), x.dtype, x.device, amp)
        if key not in self._graphs and self._may_capture(x):
            self._try_capture(key, x, amp)

    @property
    def pending(self) -> bool:
        """Whether shapes wait for :meth:`capture_pending`."""
        return bool(self._pending)

    def capture_pending(self) -> None:
        """Capture the shapes that were deferred (on the current stream, the one they were staged on)."""
        pending, self._pending = self._pending, {}
        for key, (x, amp) in pending.items():
            if key not in self._graphs and self._may_capture(x):
                self._try_capture(key, x, amp)

    def release(self) -> None:
        """Drop the captured graphs and their memory (captured again if used again)."""
        self._graphs.clear()
        self._pending.clear()

    def _may_capture(self, x: torch.Tensor) -> bool:
        return len(self._graphs) < self.max_graphs and self.failure is None and x.is_cuda

    def _try_capture(self, key: tuple, x: torch.Tensor, amp: torch.dtype | None) -> tuple | None:
        try:
            entry = self._capture(x, amp)
            self._check(entry, amp)
        except Exception as err:  # noqa: BLE001 - not capturable: eager from now on
            self.failure = f"{type(err).__name__}: {err}".splitlines()[0]
            warnings.warn(f"StreamPipeline: the backbone's forward cannot be captured as a CUDA graph"
                          f" ({self.failure}); it runs eagerly.", stacklevel=3)
            return None
        self._graphs[key] = entry
        return entry

    def _autocast(self, x: torch.Tensor, amp: torch.dtype | None) -> contextlib.AbstractContextManager:
        if amp is None:
            return contextlib.nullcontext()
        return torch.autocast(x.device.type, dtype=amp, cache_enabled=False)

    def _capture(self, x: torch.Tensor, amp: torch.dtype | None) -> tuple[torch.cuda.CUDAGraph, torch.Tensor, Any]:
        static_in = x.clone()
        stream = torch.cuda.current_stream()
        with torch.no_grad(), self._autocast(x, amp):
            for _ in range(self.warmup):  # on the current side stream, as CUDA graph capture requires
                self.forward(static_in)
            stream.synchronize()
            graph = torch.cuda.CUDAGraph()
            # capture_begin/end rather than ``torch.cuda.graph``, which empties the device and pinned-host caches
            # (the loader's pinning and the training step would then allocate afresh); thread-local: other threads
            # (training, pinning) keep calling CUDA while this one captures
            graph.capture_begin(capture_error_mode="thread_local")
            try:
                static_out = self.forward(static_in)
            except Exception:
                with contextlib.suppress(Exception):
                    graph.capture_end()
                _clear_generator_capture(x.device)
                raise
            graph.capture_end()
        return graph, static_in, static_out

    def _check(self, entry: tuple, amp: torch.dtype | None) -> None:
        """The graph's output equals the eager forward's on the captured input (once per graph)."""
        graph, static_in, static_out = entry
        graph.replay()
        with torch.no_grad(), self._autocast(static_in, amp):
            eager = self.forward(static_in)
        for got, want in zip(_tensors(static_out), _tensors(eager)):
            tol = 1e-2 if got.dtype in (torch.float16, torch.bfloat16) else 1e-3  # TF32 convolutions
            if got.shape != want.shape or not torch.allclose(got.float(), want.float(), rtol=tol, atol=tol):
                raise RuntimeError("the graph's output differs from the eager forward's")


def _clear_generator_capture(device: torch.device) -> None:
    """A failed capture leaves the device's default CUDA generator marked as capturing, so that every later
    eager random draw on it fails; the end of a capture that succeeds clears the mark."""
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=torch.cuda.Stream(device), capture_error_mode="thread_local"):
            torch.zeros(1, device=device)
    except Exception as err:  # noqa: BLE001
        warnings.warn(f"StreamPipeline: the CUDA generator may be left in capture mode ({err})", stacklevel=2)


def _tensors(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _tensors(o)]
    if isinstance(out, dict):
        return [t for o in out.values() for t in _tensors(o)]
    return []


def _clone(out: Any) -> Any:
    if isinstance(out, torch.Tensor):
        return out.clone()
    if isinstance(out, (list, tuple)):
        return type(out)(_clone(o) for o in out)
    if isinstance(out, dict):
        return {k: _clone(v) for k, v in out.items()}
    return out
