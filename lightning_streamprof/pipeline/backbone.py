"""The frozen backbone: finding it, checking it, and the proxy that serves its staged output."""

from __future__ import annotations

import warnings
from typing import Any, Callable

import torch
from torch import nn


def resolve_backbone(root: nn.Module, spec: str | nn.Module) -> tuple[str, nn.Module]:
    """``(dotted name, module)`` for a dotted path below ``root`` or a submodule object."""
    if isinstance(spec, nn.Module):
        for name, module in root.named_modules():
            if module is spec and name:
                return name, module
        raise ValueError("StreamPipeline: `backbone` is not a submodule of the LightningModule")
    try:
        return spec, root.get_submodule(spec)
    except AttributeError:
        raise ValueError(f"StreamPipeline: the LightningModule has no submodule {spec!r} (`backbone`)") from None


def check_frozen(name: str, module: nn.Module) -> None:
    trainable = [n for n, p in module.named_parameters() if p.requires_grad]
    if trainable:
        shown = ", ".join(trainable[:3]) + (", ..." if len(trainable) > 3 else "")
        raise ValueError(
            f"StreamPipeline: backbone {name!r} has trainable parameters ({shown}); running it ahead would use"
            f" stale weights. Freeze it (`requires_grad_(False)`) or pass `backbone=None`."
        )


def frozen_children(root: nn.Module) -> list[tuple[str, nn.Module]]:
    """Direct children that have parameters and none of them trainable."""
    out = []
    for name, child in root.named_children():
        params = list(child.parameters())
        if params and not any(p.requires_grad for p in params):
            out.append((name, child))
    return out


class BackboneProxy:
    """Replaces ``module.forward`` (an instance attribute, so the state dict is unchanged): a call with the
    staged input tensor returns the staged output, any other call computes normally."""

    def __init__(self, module: nn.Module, cuda_graph: bool = False, defer_capture: Callable[[], bool] = lambda: False) -> None:
        self.module = module
        self._original: Callable[..., Any] = module.forward
        self.graphed = GraphedForward(self._original, defer=defer_capture) if cuda_graph else None
        self.use_graph = cuda_graph  # whether ``compute`` replays the graph (auto switches it per trial)
        self.staged_input: torch.Tensor | None = None
        self.staged_output: Any = None
        self.hits = 0
        self.misses = 0
        module.forward = self._forward  # type: ignore[method-assign]

    def compute(self, x: torch.Tensor) -> Any:
        if self.graphed is not None and self.use_graph:
            return self.graphed(x)
        with torch.no_grad():
            return self._original(x)

    def serve(self, x: torch.Tensor | None, output: Any) -> None:
        self.staged_input, self.staged_output = x, output

    def _forward(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and self.staged_input is not None and args[0] is self.staged_input:
            out = self.staged_output
            self.staged_input = self.staged_output = None
            self.hits += 1
            return out
        self.misses += 1
        return self._original(*args, **kwargs)

    def remove(self) -> None:
        if self.module.__dict__.get("forward") == self._forward:
            del self.module.forward
        self.staged_input = self.staged_output = None


def find_batch_input(batch: Any, tensor: torch.Tensor) -> Callable[[Any], torch.Tensor] | None:
    """A getter for the position of ``tensor`` inside ``batch`` (tensor, sequence or mapping)."""
    if batch is tensor:
        return lambda b: b
    if isinstance(batch, (list, tuple)):
        for i, item in enumerate(batch):
            if item is tensor:
                return lambda b, i=i: b[i]
    if isinstance(batch, dict):
        for key, item in batch.items():
            if item is tensor:
                return lambda b, key=key: b[key]
    return None


def default_batch_input(batch: Any) -> torch.Tensor:
    """The first tensor of a batch: the tensor itself, ``batch[0]`` or the first tensor value of a dict."""
    if isinstance(batch, torch.Tensor):
        return batch
    if isinstance(batch, (list, tuple)) and batch and isinstance(batch[0], torch.Tensor):
        return batch[0]
    if isinstance(batch, dict):
        for value in batch.values():
            if isinstance(value, torch.Tensor):
                return value
    raise ValueError("StreamPipeline: cannot tell which tensor of the batch the backbone takes; pass `backbone_input`")


class GraphedForward:
    """The backbone's forward captured as CUDA graphs, one per input (shape, dtype), for fixed-shape batches.

    Replays on the current (side) stream; the output is cloned so that the next replay cannot overwrite a
    result the training stream still reads. After ``max_graphs`` shapes, new shapes run eagerly; a forward
    that cannot be captured (a host synchronisation, a CPU operation) runs eagerly from then on, with one
    warning (``failure`` keeps the reason).

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
        self._pending: dict[tuple, torch.Tensor] = {}
        self.replays = 0
        self.eager = 0
        self.failure: str | None = None

    def __call__(self, x: torch.Tensor) -> Any:
        key = (tuple(x.shape), x.dtype, x.device)
        entry = self._graphs.get(key)
        if entry is None:
            if self._may_capture(x):
                if self.defer():
                    self._pending.setdefault(key, x)
                else:
                    entry = self._try_capture(key, x)
            if entry is None:
                self.eager += 1
                with torch.no_grad():
                    return self.forward(x)
        graph, static_in, static_out = entry
        static_in.copy_(x)
        graph.replay()
        self.replays += 1
        return _clone(static_out)

    @property
    def pending(self) -> bool:
        """Whether shapes wait for :meth:`capture_pending`."""
        return bool(self._pending)

    def capture_pending(self) -> None:
        """Capture the shapes that were deferred (on the current stream, the one they were staged on)."""
        pending, self._pending = self._pending, {}
        for key, x in pending.items():
            if key not in self._graphs and self._may_capture(x):
                self._try_capture(key, x)

    def _may_capture(self, x: torch.Tensor) -> bool:
        full = len(self._graphs) >= self.max_graphs
        return not full and self.failure is None and x.is_cuda and not torch.is_autocast_enabled()

    def _try_capture(self, key: tuple, x: torch.Tensor) -> tuple | None:
        try:
            entry = self._capture(x)
        except Exception as err:  # noqa: BLE001 - not capturable: eager from now on
            self.failure = f"{type(err).__name__}: {err}".splitlines()[0]
            warnings.warn(f"StreamPipeline: the backbone's forward cannot be captured as a CUDA graph"
                          f" ({self.failure}); it runs eagerly.", stacklevel=3)
            return None
        self._graphs[key] = entry
        return entry

    def release(self) -> None:
        """Drop the captured graphs and their memory (captured again if used again)."""
        self._graphs.clear()
        self._pending.clear()

    def _capture(self, x: torch.Tensor) -> tuple[torch.cuda.CUDAGraph, torch.Tensor, Any]:
        static_in = x.clone()
        with torch.no_grad():
            for _ in range(self.warmup):  # on the current side stream, as CUDA graph capture requires
                self.forward(static_in)
            graph = torch.cuda.CUDAGraph()
            try:
                # thread-local: other threads (training, pinning) keep calling CUDA while this one captures
                with torch.cuda.graph(graph, stream=torch.cuda.current_stream(), capture_error_mode="thread_local"):
                    static_out = self.forward(static_in)
            except Exception:
                _clear_generator_capture(x.device)
                raise
        return graph, static_in, static_out


def _clear_generator_capture(device: torch.device) -> None:
    """A failed capture leaves the device's default CUDA generator marked as capturing, so that every later
    eager random draw on it fails; the end of a capture that succeeds clears the mark."""
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=torch.cuda.Stream(device), capture_error_mode="thread_local"):
            torch.zeros(1, device=device)
    except Exception as err:  # noqa: BLE001
        warnings.warn(f"StreamPipeline: the CUDA generator may be left in capture mode ({err})", stacklevel=2)


def _clone(out: Any) -> Any:
    if isinstance(out, torch.Tensor):
        return out.clone()
    if isinstance(out, (list, tuple)):
        return type(out)(_clone(o) for o in out)
    if isinstance(out, dict):
        return {k: _clone(v) for k, v in out.items()}
    return out
