"""GPU instances at the papers' settings, with the measured host link (issue 20, items 1 and 2).

    python -m memplan.experiments.gpu_profile --device cuda --out instances/ --summary gpu_profile.csv
    python -m memplan.experiments.gpu_profile --device cuda --out instances/ --models resnet50,gpt2
    python -m memplan.experiments.gpu_profile --device cpu --quick --out /tmp/dry     # dry run, no GPU
    python -m memplan.experiments.gpu_profile --list

For every setting of :data:`SETTINGS` (network, batch, input: the settings of papers 003 and 004)
this builds the zoo network, linearizes it and profiles every stage with
:func:`memplan.models.profiler.profile_model` (the profiler of ``memplan profile``; nothing is
measured any other way here), then writes ``<setting>-<gpu>.json`` (e.g.
``resnet50-b32-224-h100.json``) with the provenance the profiler records (GPU model, driver, torch,
CUDA and cuDNN versions, TF32 and determinism flags, date, batch, input shape, dtype, the
linearization and its groups, and how each quantity was measured: medians of repeated runs after a
warm-up, CUDA events after a synchronize; sizes from the caching allocator's statistics) plus the
setting's source in the papers and the command line.

The host link (pinned host memory <-> device) is measured once per run with
:func:`memplan.models.profiler.measure_host_link` and written into every instance: its ``platform``
section (device memory, bandwidth = the slower direction, 1 GPU, the GPU's name) and
``provenance.host_link`` (both directions, buffer size, repeats, method). On a CPU nothing is
measured: the instances of a dry run have no ``platform`` section and ``host_link`` says why.

A CPU run is a dry run of the script (``--quick`` profiles two tiny networks in seconds); it may
not write into the shipped ``instances/`` folder. ``--budget`` stops starting new settings after that
many seconds (the GPU machine's commands are limited to 10 minutes); files already present are
kept unless ``--force``. ``--tar`` bundles what was written into one archive (the GPU machine returns
at most 8 files); ``--torchvision`` writes the zoo-vs-torchvision table
(:func:`memplan.models.networks.torchvision_check.torchvision_table`).
"""
from __future__ import annotations

import argparse
import gc
import json
import re
import shlex
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memplan.experiments.cli_checks import (CliError, OneLineParser, device_problem, output_dir, output_file,
                                            positive_int, positive_number, run_script, writing)
from memplan.experiments.runtime_check import write_csv
from memplan.models.instance import save_instance, shipped_dir
from memplan.models.solution import InputError
from memplan.models.units import fmt_memory, fmt_time


@dataclass(frozen=True)
class Setting:
    """One instance to profile: zoo network, batch, per-sample input shape, where the setting comes from."""

    key: str
    network: str
    batch: int
    input: tuple[int, ...]
    source: str
    model_kw: dict[str, Any] = field(default_factory=dict)


_P003 = "paper 003 (pipelined model parallelism), section 7: batch 8"
_P004 = "paper 004 (rotor), section 5: batch 32 at 224 x 224"

#: the papers' settings, in the order they are profiled (the most used first)
SETTINGS: list[Setting] = [
    *[Setting(f"{n}-b32-224", n, 32, (3, 224, 224), _P004 + (" (and paper 003's ResNet-34, Figures 8-9)"
                                                               if n == "resnet34" else ""))
      for n in ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "densenet121")],
    *[Setting(f"{n}-b8-224", n, 8, (3, 224, 224), _P003 + (" (ResNet-50: Figures 10-11)" if n == "resnet50" else ""))
      for n in ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "densenet121")],
    Setting("resnet18-b8-1000", "resnet18", 8, (3, 1000, 1000), "paper 003, Figures 6-7: ResNet-18, batch 8, "
            "image size 1000"),
    Setting("inception_v3-b32-299", "inception_v3", 32, (3, 299, 299), "paper 004, Figure 15: Inception v3 at "
            "299 x 299 (torchvision's input size)"),
    Setting("vgg16-b32-224", "vgg16", 32, (3, 224, 224), "VGG-16 at 224 x 224, batch 32 (paper 002 lists VGG "
            "among the chains it handles)"),
    Setting("gpt2-small-b8-s1024", "gpt2", 8, (1024,), "GPT-2 small (124M parameters), sequence 1024 as paper "
            "004's introduction quotes for GPT-2, batch 8"),
    Setting("preact_resnet1001-b8-224", "preact_resnet1001", 8, (3, 224, 224), "paper 004, Figure 7: "
            "ResNet-1001 at 224 x 224, batch 8 (the paper's estimate: store-all needs 225 GiB)"),
]

_TINY_GPT = dict(n_layer=2, n_embd=32, n_head=4, vocab=50, n_ctx=16)
#: tiny settings for a dry run (CPU, seconds); never written into instances/
QUICK: list[Setting] = [
    Setting("dryrun-resnet18-b2-32", "resnet18", 2, (3, 32, 32), "dry run (tiny input), not a paper setting"),
    Setting("dryrun-gpt2-b2-s8", "gpt2", 2, (8,), "dry run (2-layer GPT-2, width 32), not a paper setting",
            _TINY_GPT),
]


def device_tag(device) -> str:
    """Short tag of the device for file names: ``h100``, ``h200``, ``a100``... or ``cpu``."""
    import torch

    dev = torch.device(device)
    if dev.type != "cuda":
        return dev.type
    name = torch.cuda.get_device_name(dev)
    m = re.search(r"\b([A-Z]{1,2}\d{2,4}[A-Z]?)\b", name.upper().replace("NVIDIA", ""))
    if m:
        return m.group(1).lower()
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "cuda"


def select(names: str | None, quick: bool) -> list[Setting]:
    """Settings named in ``names`` (comma-separated setting keys or network names; all when None)."""
    pool = QUICK if quick else SETTINGS
    if not names:
        return list(pool)
    out: list[Setting] = []
    words = [w.strip() for w in names.split(",") if w.strip()]
    if not words:
        raise InputError(f"--models {names!r}: no setting or network named; see --list (or leave it out for all)")
    for word in words:
        found = [s for s in pool if word in (s.key, s.network)]
        if not found:
            valid = sorted({s.key for s in pool} | {s.network for s in pool})
            raise InputError(f"--models: unknown setting or network {word!r}; choose from {', '.join(valid)}")
        out += [s for s in found if s not in out]
    return out


def _is_within(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
        return True
    except ValueError:
        return False


def _compact_link(link: dict[str, Any]) -> dict[str, Any]:
    """The host-link measurement as the instances' provenance keeps it (no per-copy samples)."""
    return {"measured": True, "h2d_bytes_per_s": link["h2d_bytes_per_s"], "d2h_bytes_per_s": link["d2h_bytes_per_s"],
            "h2d_seconds_min_max": [min(link["h2d_seconds"]), max(link["h2d_seconds"])],
            "d2h_seconds_min_max": [min(link["d2h_seconds"]), max(link["d2h_seconds"])],
            "buffer_bytes": link["buffer_bytes"], "repeats": link["repeats"], "method": link["method"],
            "platform_bandwidth": "the slower of the two directions (the offloading model has one bandwidth)"}


def host_link(device, nbytes: int, repeats: int, enabled: bool = True) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(provenance entry, raw measurement or None). Nothing is measured, nor made up, off CUDA."""
    import torch

    from memplan.models.profiler import measure_host_link

    if torch.device(device).type != "cuda":
        return {"measured": False, "note": f"not measured: device {device} has no host-device link (dry run); "
                                           "the instance has no platform section"}, None
    if not enabled:
        return {"measured": False, "note": "not measured: --no-host-link"}, None
    try:
        raw = measure_host_link(device, nbytes=nbytes, repeats=repeats)
    except (RuntimeError, ValueError) as e:      # pinned memory refused, out of memory: say so, invent nothing
        return {"measured": False, "error": f"{type(e).__name__}: {e}".splitlines()[0]}, None
    return _compact_link(raw), raw


def _summary_row(setting: Setting, path: Path | None, chain, seconds: float, status: str, error: str = "") -> dict:
    row: dict[str, Any] = {"setting": setting.key, "network": setting.network, "batch": setting.batch,
                           "input": "x".join(map(str, setting.input)), "status": status, "file": str(path or ""),
                           "seconds": round(seconds, 2), "error": error}
    if chain is not None:
        row.update(L=chain.L, store_all_time_s=chain.store_all_time(), sum_abar_bytes=float(chain.wabar[1:].sum()),
                   weights_bytes=chain.total_weights(), device=chain.provenance.get("device", ""),
                   gpu=chain.provenance.get("gpu", ""))
    return row


SUMMARY_COLUMNS = ["setting", "network", "batch", "input", "status", "file", "seconds", "L", "store_all_time_s",
                   "sum_abar_bytes", "weights_bytes", "device", "gpu", "error"]




def run(settings: list[Setting], *, device: str, out: Path, repeats: int, force: bool = False,
        budget: float | None = None, link_bytes: int = 512 * 2**20, link_repeats: int = 20,
        measure_link: bool = True, summary: Path | None = None, command: str = "", turns: bool = False,
        progress=print) -> tuple[list[dict], list[Path], dict[str, Any] | None]:
    """Profile ``settings`` into ``out``; returns (summary rows, files written, raw host-link measurement).
    ``turns``: also calibrate the turn model (:func:`memplan.models.profiler.profile_chain`'s ``turns``)."""
    import torch

    from memplan.models.profiler import host_link_platform, profile_model

    t_start = time.perf_counter()
    tag = device_tag(device)
    link_prov, link_raw = host_link(device, link_bytes, link_repeats, enabled=measure_link)
    platform = host_link_platform(link_raw, device)          # None on a CPU
    if link_raw:
        progress(f"host link: host->device {link_raw['h2d_bytes_per_s'] / 1e9:.2f} GB/s, device->host "
                 f"{link_raw['d2h_bytes_per_s'] / 1e9:.2f} GB/s (pinned, {link_raw['buffer_bytes'] >> 20} MiB, median "
                 f"of {link_raw['repeats']})")
    else:
        progress(f"host link: {link_prov.get('note') or link_prov.get('error')}")
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    written: list[Path] = []
    for i, s in enumerate(settings):
        path = out / f"{s.key}-{tag}.json"
        elapsed = time.perf_counter() - t_start
        if budget is not None and elapsed > budget:
            rows.append(_summary_row(s, None, None, 0.0, "skipped", f"budget of {budget:g} s spent"))
            progress(f"[{i + 1}/{len(settings)}] {s.key}: skipped (budget of {budget:g} s spent)")
            continue
        if path.exists() and not force:
            rows.append(_summary_row(s, path, None, 0.0, "exists", "file exists; --force replaces it"))
            progress(f"[{i + 1}/{len(settings)}] {s.key}: {path} exists, kept (--force replaces it)")
            continue
        t0 = time.perf_counter()
        chain = None
        try:
            chain = profile_model(
                s.network, s.batch, s.input, device=device, repeats=repeats, model_kw=dict(s.model_kw),
                name=f"{s.key}-{tag}", turns=turns,
                provenance={"setting": s.key, "setting_source": s.source, "command": command,
                            "profiler": "memplan.models.profiler.profile_model (as memplan profile)",
                            "host_link": link_prov})
            save_instance(chain, path, platform, overwrite=force, time_unit="ms", memory_unit="MiB", digits=None,
                          description=f"{s.network}, batch {s.batch}, input {'x'.join(map(str, s.input))}, profiled on "
                                      f"{chain.provenance['device']} by memplan.experiments.gpu_profile ({s.source})")
            written.append(path)
            rows.append(_summary_row(s, path, chain, time.perf_counter() - t0, "ok"))
            progress(f"[{i + 1}/{len(settings)}] {s.key}: L = {chain.L}, store-all time "
                     f"{fmt_time(chain.store_all_time())}, sum abar {fmt_memory(chain.wabar[1:].sum())}, "
                     f"{time.perf_counter() - t0:.1f} s -> {path}")
        except Exception as e:  # noqa: BLE001 - one failed setting (out of memory, ...) must not stop the others
            msg = f"{type(e).__name__}: {e}".splitlines()[0][:300]
            rows.append(_summary_row(s, None, None, time.perf_counter() - t0, "error", msg))
            progress(f"[{i + 1}/{len(settings)}] {s.key}: FAILED {msg}")
        finally:
            del chain
            gc.collect()
            if torch.device(device).type == "cuda":
                torch.cuda.empty_cache()
        write_csv(rows, SUMMARY_COLUMNS, summary)            # after every setting: a timeout keeps what was done
    write_csv(rows, SUMMARY_COLUMNS, summary)
    return rows, written, link_raw


def bundle(files: list[Path], tar_path: Path, arcdir: str = "instances") -> Path:
    """Write ``files`` into a gzip tar under ``arcdir/`` (unpack here with ``tar -xzf FILE``)."""
    with writing(tar_path):
        tar_path.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(tar_path, "w:gz") as tar:
            for f in files:
                tar.add(f, arcname=f"{arcdir}/{f.name}")
    return tar_path


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m memplan.experiments.gpu_profile", name="gpu_profile",
                      description="Profile the papers' settings into instance files with the measured host link "
                                  "(issue 20).")
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu (a dry run)")
    p.add_argument("--out", help="folder for the instance files (required unless --list or only --torchvision)")
    p.add_argument("--models", help="comma-separated setting keys or network names (default: all; see --list)")
    p.add_argument("--quick", action="store_true", help="tiny settings (a dry run in seconds), one timed run each")
    p.add_argument("--repeats", type=positive_int, help="timed runs per operation, the median is kept (default 10; "
                   "--quick: 1)")
    p.add_argument("--threads", type=positive_int, help="torch CPU threads")
    p.add_argument("--force", action="store_true", help="replace existing files (default: keep them)")
    p.add_argument("--budget", type=positive_number, default=None, help="seconds after which no new setting is started")
    p.add_argument("--no-host-link", action="store_true", help="do not measure the host link")
    p.add_argument("--host-link-mib", type=positive_int, default=None, help="pinned buffer size of the host-link "
                   "measurement (default 512)")
    p.add_argument("--summary", help="CSV with one row per setting (status, L, store-all time, ...)")
    p.add_argument("--host-link-json", help="write the raw host-link measurement (every copy's time) here")
    p.add_argument("--tar", help="bundle the instance files written into this .tar.gz")
    p.add_argument("--torchvision", help="write the zoo-vs-torchvision table (parameter counts, output shapes) "
                   "to this CSV")
    p.add_argument("--turns", action="store_true", help="also calibrate the turn model (the no-grad forwards' own "
                   "times and a turn's cost, as runtime_check profiles; rotor and the baselines plan with them)")
    p.add_argument("--list", action="store_true", help="print the settings and exit")
    return p


def main(argv=None) -> int:
    return run_script(_parser(), lambda a: _main(a, argv), argv)


def _main(a: argparse.Namespace, argv) -> int:
    if a.list:
        for s in (QUICK if a.quick else SETTINGS):
            print(f"{s.key:28s} {s.network:18s} batch {s.batch:3d}  input {'x'.join(map(str, s.input)):12s} {s.source}")
        return 0
    import torch

    if a.device not in ("cpu", "cuda") and not a.device.startswith("cuda:"):
        raise InputError(f"--device {a.device!r}: use cuda (the GPU machine) or cpu (a dry run)")
    profiles = a.out or not a.torchvision          # --torchvision alone profiles nothing, on no device
    if profiles and a.device.startswith("cuda") and not torch.cuda.is_available():
        raise InputError(f"--device {a.device}: no CUDA device is available to this torch ({torch.__version__}); "
                         "run on the GPU machine, or --device cpu --quick for a dry run")
    why = device_problem(a.device) if profiles else None     # cuda:N beyond this machine's devices
    if why:
        raise CliError(why)
    if not a.out and not a.torchvision:
        raise InputError("--out: give the folder for the instance files (e.g. --out instances/)")
    if a.host_link_mib is not None and a.no_host_link:
        raise CliError(f"--host-link-mib {a.host_link_mib} and --no-host-link: the buffer of a measurement that "
                       "--no-host-link leaves out; give one of the two")
    if not a.out:
        for flag in ("--summary", "--host-link-json", "--tar"):
            if getattr(a, flag[2:].replace("-", "_")):
                raise CliError(f"{flag}: written by the profiles, which need --out FOLDER; add it, or leave "
                               f"{flag} out")
    # every output checked before anything is profiled (a result is never lost to a path that cannot
    # be written); a write that fails later is one line too (cli_checks.writing)
    for flag in ("--summary", "--host-link-json", "--tar", "--torchvision"):
        if getattr(a, flag[2:].replace("-", "_")) is not None:
            output_file(getattr(a, flag[2:].replace("-", "_")), flag)
    if a.out:
        out = Path(a.out)
        if not a.device.startswith("cuda") and _is_within(out, shipped_dir()):
            raise InputError(f"--out {a.out}: a {a.device} run is a dry run and does not write into the shipped "
                             "instances folder; give a scratch folder")
        settings = select(a.models, a.quick)
        out = output_dir(out, "--out")
    status = 0
    if a.torchvision:
        from memplan.models.networks.torchvision_check import torchvision_table, write_table

        try:
            rows = torchvision_table()
        except ImportError as e:
            if not a.out:
                raise InputError(f"--torchvision: {e}") from None
            print(f"torchvision check: not run: {e}")        # the profiles still run
            status = 1
        else:
            with writing(a.torchvision):
                write_table(rows, Path(a.torchvision))
            bad = [r["network"] for r in rows if not r["equal"]]
            print(f"torchvision check: {len(rows) - len(bad)} of {len(rows)} networks equal"
                  + (f"; DIFFERENT: {', '.join(bad)}" if bad else "") + f" -> {a.torchvision}")
            status = 1 if bad else 0
        if not a.out:
            return status
    if a.threads:
        torch.set_num_threads(a.threads)
    repeats = a.repeats or (1 if a.quick else 10)
    command = "python -m memplan.experiments.gpu_profile " + " ".join(shlex.quote(x) for x in (argv or sys.argv[1:]))
    rows, written, link_raw = run(settings, device=a.device, out=out, repeats=repeats, force=a.force, budget=a.budget,
                                  link_bytes=(a.host_link_mib or 512) * 2**20, measure_link=not a.no_host_link,
                                  summary=Path(a.summary) if a.summary else None, command=command, turns=a.turns)
    if a.host_link_json:
        with writing(a.host_link_json):
            Path(a.host_link_json).parent.mkdir(parents=True, exist_ok=True)
            Path(a.host_link_json).write_text(json.dumps(link_raw if link_raw else {"measured": False,
                                                                                    "device": a.device},
                                                         indent=1) + "\n")
    if a.tar:
        bundle(written, Path(a.tar))
        print(f"{len(written)} instance file(s) bundled into {a.tar} (unpack: tar -xzf {Path(a.tar).name})")
    failed = [r for r in rows if r["status"] in ("error", "skipped")]
    print(f"{len(written)} written, {sum(r['status'] == 'exists' for r in rows)} kept, {len(failed)} failed or skipped")
    return 1 if failed or status else 0


if __name__ == "__main__":
    sys.exit(main())
