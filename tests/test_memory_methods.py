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


class _FakeAllocator:
    """A stand-in for the CUDA caching allocator's counters (no GPU on this machine): the step run in a
    window allocates ``step_bytes`` requested bytes, which the allocator rounds up and, reusing an
    unsplit cached block, inflates by ``rest`` bytes, a figure that depends on the window."""

    def __init__(self, base=1000, base_requested=900, step_bytes=5000, rest=0, requested_stat=True):
        self.base, self.base_requested = base, base_requested
        self.step_bytes, self.rest, self.requested_stat = step_bytes, rest, requested_stat
        self.peak, self.peak_requested = base, base_requested

    def run(self):
        self.peak = max(self.peak, self.base + -(-self.step_bytes // 512) * 512 + self.rest)
        self.peak_requested = max(self.peak_requested, self.base_requested + self.step_bytes)

    def install(self, monkeypatch):
        import torch

        def stats(*a):
            out = {"requested_bytes.all.current": self.base_requested}
            if self.requested_stat:
                out["requested_bytes.all.peak"] = self.peak_requested
            return out

        def reset(*a):
            self.peak, self.peak_requested = self.base, self.base_requested

        for name, fn in {"synchronize": lambda *a: None, "empty_cache": lambda *a: None,
                         "memory_allocated": lambda *a: self.base, "memory_stats": stats,
                         "reset_peak_memory_stats": reset, "max_memory_allocated": lambda *a: self.peak}.items():
            monkeypatch.setattr(torch.cuda, name, fn)


def test_cuda_peak_choice_requested_is_the_same_in_every_window(monkeypatch):
    """``_measure`` on CUDA (the search's and bench_budget's one method): ``cuda_peak="requested"`` gives
    the bytes the step asked for whatever unsplit rest the allocator counted in that window, so the
    same step measured in two windows compares equal with a budget set to either reading;
    ``"allocated"`` gives max_memory_allocated above the base (rounded to 512 B, the rest included);
    ``stats`` receives both; an unknown choice is an InputError naming the two."""
    from memplan._compile_budget import _measure
    from memplan.models.solution import InputError

    fake = _FakeAllocator(step_bytes=5000)
    fake.install(monkeypatch)
    dev = torch.device("cuda")
    readings = []
    for rest in (0, 196_608, 1_441_792):          # the three H100 windows of ResNet-50's fraction 0.5
        fake.rest = rest
        stats = {}
        req = _measure(fake.run, dev, stats, cuda_peak="requested")
        readings.append((req, stats["allocated"]))
        assert _measure(fake.run, dev, cuda_peak="allocated") == 5120 + rest
    assert [r for r, _ in readings] == [5000, 5000, 5000]
    assert [a for _, a in readings] == [5120, 5120 + 196_608, 5120 + 1_441_792]
    with pytest.raises(InputError, match="requested, allocated"):
        _measure(fake.run, dev, cuda_peak="reserved")


def test_cuda_requested_peak_missing_statistic_is_an_error_not_zero(monkeypatch):
    """A torch whose allocator keeps no requested_bytes would read as a peak of 0 (every step fits
    every budget): the tracker refuses instead and names the other choice."""
    from memplan._compile_budget import _measure

    _FakeAllocator(requested_stat=False).install(monkeypatch)
    with pytest.raises(RuntimeError, match="cuda_peak='allocated'"):
        _measure(lambda: None, torch.device("cuda"), cuda_peak="requested")


def test_budget_search_refuses_an_unknown_cuda_peak():
    import memplan
    from memplan.models.solution import InputError

    m = torch.nn.Linear(4, 1)
    with pytest.raises(InputError, match="cuda_peak 'max'.*requested, allocated"):
        memplan.compile_under_budget(m, (torch.randn(2, 4),), "1MiB", cuda_peak="max")
