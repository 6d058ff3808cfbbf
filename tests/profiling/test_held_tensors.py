"""What Python holds at an out-of-memory error, by kind, each storage counted once: checked on CPU tensors against
sizes computed by hand (the report asks for the CUDA ones)."""

import torch

from lightning_streamprof.profiling.held_tensors import held_tensors


def test_parameters_gradients_optimizer_state_and_other_tensors_each_storage_once():
    torch.manual_seed(0)
    model = torch.nn.Linear(100, 50)  # 5,000 + 50 floats: 20,200 bytes
    model.register_buffer("counts", torch.zeros(25, dtype=torch.int64))  # 200 bytes
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 100)).sum().backward()
    opt.step()  # gradients 20,200 bytes; Adam: exp_avg and exp_avg_sq per parameter (40,400) and 2 steps (CPU)
    big = torch.zeros(1000, 1000, dtype=torch.uint8)  # 1,000,000 bytes
    view = big[:10]  # the same storage: not counted again
    small = torch.ones(3, dtype=torch.float64)
    held = held_tensors(model, [opt], device_type="cpu", objects=[big, view, small, model.weight, "not a tensor"])
    step_bytes = sum(s["step"].untyped_storage().nbytes() for s in opt.state.values())
    assert held.kinds == {"parameters": 20_200, "gradients": 20_200, "buffers": 200,
                          "optimizer state": 40_400 + step_bytes, "other tensors": 1_000_024}
    assert held.largest == [(1_000_000, "uint8", (1000, 1000)), (24, "float64", (3,))]
    text = held.describe(allocated=held.total + 3 * 2**20)
    assert text.startswith("parameters 19.7 KiB, gradients 19.7 KiB, buffers 200 bytes, optimizer state")
    assert "largest other tensors: 976.6 KiB uint8[1000, 1000], 24 bytes float64[3]" in text
    assert text.endswith("; 3.0 MiB held outside Python (autograd's saved tensors, caches)")


def test_tensors_on_another_device_and_nothing_held():
    held = held_tensors(None, [], device_type="cuda", objects=[torch.zeros(10)])
    assert held.total == 0 and held.describe() == "no tensor that Python holds"
