"""The two CPU memory measurements agree where both see everything, and the profiler-based one sees
what the dispatch tracker cannot (models.memory)."""
import pytest

torch = pytest.importorskip("torch")

from memplan.models.memory import TensorMemoryTracker, profiler_peak  # noqa: E402


def test_profiler_peak_hand_case():
    """Allocate 4 MB, then 8 MB, free the 4 MB, allocate 2 MB: peak 12 MB, 10 MB at the end."""
    def step():
        a = torch.empty(4_000_000, dtype=torch.uint8)
        b = torch.empty(8_000_000, dtype=torch.uint8)
        del a
        c = torch.empty(2_000_000, dtype=torch.uint8)
        return b, c

    out, peak, final = profiler_peak(step)
    assert (peak, final) == (12_000_000, 10_000_000)
    assert out[0].numel() == 8_000_000


def test_profiler_peak_equals_the_dispatch_tracker_on_an_eager_step():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    for p in m.parameters():
        p.grad = torch.zeros_like(p)
    x = torch.randn(64, 256)

    def step():
        m(x).square().sum().backward()

    with TensorMemoryTracker() as tr:
        step()
    _, peak, _ = profiler_peak(step)
    assert peak == tr.peak > 0


def test_cuda_tracker_holds_the_cyclic_collector_during_its_window(monkeypatch):
    """Garbage collected inside a measured window would lower the allocated bytes below the base: the
    CUDA tracker keeps the cyclic collector off from its base to its exit (and puts it back as it found
    it, also when the measured code raises), without the full collection that cost 0.25 s per window
    after an Inductor compile. The allocator's functions are stand-ins here (no GPU on this machine)."""
    import gc

    import torch

    from memplan.models.memory import CudaMemoryTracker

    for name, fn in {"synchronize": lambda *a: None, "memory_allocated": lambda *a: 100,
                     "memory_stats": lambda *a: {"requested_bytes.all.current": 90},
                     "reset_peak_memory_stats": lambda *a: None, "max_memory_allocated": lambda *a: 160}.items():
        monkeypatch.setattr(torch.cuda, name, fn)
    was = gc.isenabled()
    gc.enable()
    try:
        with CudaMemoryTracker("cuda") as tr:
            assert not gc.isenabled()
            assert tr.peak == 60 and tr.current == 0
        assert gc.isenabled()
        with pytest.raises(RuntimeError):
            with CudaMemoryTracker("cuda"):
                raise RuntimeError("out of memory")
        assert gc.isenabled()
        gc.disable()                      # a caller that had it off keeps it off
        with CudaMemoryTracker("cuda"):
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable() if was else gc.disable()
