#!/usr/bin/env bash
# Issue 20 on a GPU machine: GPU instances, the measured host link, plans executed on the GPU,
# paper 004's throughput comparison and the torchvision check, in two device calls of < 10 minutes;
# a third measures issue 28's memory budget against torch.compile's.
#
#   HERE (a machine with the package registry), once:   bash benchmarks/gpu_campaign.sh prepare
#   device call 1 (carry [".whl"], timeout_s 600):        bash benchmarks/gpu_campaign.sh profile
#   device call 2 (carry [".whl"], timeout_s 600):        bash benchmarks/gpu_campaign.sh runtime
#   device call 3 (carry [".whl"], timeout_s 600):        bash benchmarks/gpu_campaign.sh budget   (issue 28)
#   or, one call for both 28 and 27 (timeout_s 560):     bash benchmarks/gpu_campaign.sh both
#   or, the six H200 chains again (timeout_s 560):      bash benchmarks/gpu_campaign.sh reprofile
#   the next session lent 15 minutes: `issue27` (timeout_s 330), then warm `next` (timeout_s 470)
#   issue 27's GPU items (timeout_s 330):              bash benchmarks/gpu_campaign.sh issue27
#   GPT-2's budget, --offload (timeout_s 470):         bash benchmarks/gpu_campaign.sh next
#     then, warm, with what is left (timeout_s GPT2_LOW_S + 40): GPT2_LOW_S=... GPT2_LOW_FRACTIONS=0.2 ... gpt2-low
#   what the H200 session of 2026-11-27 ran first (timeout_s 450): ... spikes-offload
#   ResNet-50 b32's executed plans and budget (as `next` ran on 2026-11-27, timeout_s 580): ... r50
#   (the noise diagnosis alone, under a minute:        python benchmarks/gpu_timing_noise.py --device cuda)
#   paper 001's offloading executed (timeout_s 560):   bash benchmarks/gpu_campaign.sh offload
#   GPT-2's budget at fractions 0.3 and 0.1 (timeout_s 470): bash benchmarks/gpu_campaign.sh gpt2-low
#   what slows some of ResNet-50's samples (timeout_s 200):  bash benchmarks/gpu_campaign.sh spikes
#   HERE, after each call (FILES = the call's files_at):  bash benchmarks/gpu_campaign.sh unpack FILES [SUFFIX]
#   HERE, without a GPU (CPU dry run of every call):      bash benchmarks/gpu_campaign.sh dry-run
# A session lent 15 minutes of device time (starts included) runs one long call, and another right after
# it while the machine is warm (it goes back after 30 s idle): on 2026-11-27 `next` (375 s) then
# `offload` (111 s) then a GPT-2 budget (239 s) fitted in 13 minutes; the H200 session of the same day ran
# `spikes-offload` (206 s with the start), `gpt2-low` at 0.1 (259 s) and 0.3 (206 s) and a 90 s
# runtime_check in 789 s; the H100 session of 2026-11-28 ran `issue27` (182 s, 223 s with the start), `next` (331 s)
# and two runtime_checks by hand (99 s, GPT-2; 155 s, ResNet-50 with 3 plans) in 845 s. Next time: `issue27`, then
# `next` with what is left (NEXT_BUDGET_S at least 230).
#
# The device machine has torch (CUDA), torchvision, numpy, pandas, networkx, scipy, numba, pytest, but
# not pydantic (memplan's instance files need it) and no network: `prepare` downloads pydantic's wheels
# for its Python 3.12 into .whl/ (ignored by git), which the calls carry. memplan is not installed
# there: a shim folder of symbolic links (/tmp/memplan_shim/memplan -> memplan/*.py, models/, ...)
# on PYTHONPATH makes `import memplan` work without building anything.
#
# What comes back ($OUT: at most 8 files, 16 MiB each):
#   profile: instances_gpu.tar.gz (every instance file, under instances/), gpu_profile_summary.csv,
#            host_link.json, torchvision_check.csv, campaign_profile.log           (5 files)
#   runtime: runtime_gpu.csv, throughput_gpu.csv, runtime_traces.json, campaign_runtime.log   (4 files)
#   budget:  bench_budget_gpu.csv, bench_budget_gpu.txt, campaign_budget.log                  (3 files)
#            (GPT-2 small b8 s1024, then ResNet-50 b32 224x224; Inductor; PyTorch's budgets 1, 0.5, 0.3,
#            0.1 within 110 s of compiles per network, memplan at each of their measured peaks and below)
# Every Python command runs under `timeout` and with a --budget, so the files are written before the
# device's 10-minute limit; CSVs are rewritten after every network/setting (a kill keeps what was done).
set -uo pipefail

step=${1:-help}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python3}
WHEELS=${WHEEL_DIR:-$ROOT/.whl}
OUTDIR=${OUT:-$ROOT/gpu_out}
WORK=${WORK_DIR:-/tmp/gpu_campaign}
SHIM=${SHIM_DIR:-/tmp/memplan_shim}
# pydantic and what it needs, at the versions this project is tested with (Python 3.12 wheels)
WHEEL_PINS="pydantic==2.13.4 pydantic-core==2.46.4 annotated-types==0.7.0 typing-inspection==0.4.2 typing-extensions==4.15.0"

log() { echo "[$(date -u +%H:%M:%S)] $*"; }

setup_env() {
    # memplan importable without installing: memplan/ of the shim holds links to the package's files
    rm -rf "$SHIM" && mkdir -p "$SHIM/memplan" || return 3
    for f in "$ROOT"/memplan/*.py; do ln -s "$f" "$SHIM/memplan/"; done
    for d in models formulations baselines experiments instances; do ln -s "$ROOT/$d" "$SHIM/memplan/$d"; done
    export PYTHONPATH="$SHIM${PYTHONPATH:+:$PYTHONPATH}"
    if ! "$PY" -c "import pydantic" 2>/dev/null; then
        if ! ls "$WHEELS"/*.whl >/dev/null 2>&1; then
            log "pydantic is missing and $WHEELS has no wheels: run 'bash benchmarks/gpu_campaign.sh prepare' on a" \
                "machine with the registry and carry .whl"
            return 3
        fi
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
            "$WHEELS"/*.whl || return 3
        export PYTHONPATH="/tmp/site:$PYTHONPATH"
    fi
    "$PY" - <<'EOF' || return 3
import sys
import torch
import memplan, memplan.remat, memplan.experiments.gpu_profile, memplan.experiments.runtime_check  # noqa: F401
print(f"python {sys.version.split()[0]}; memplan from {memplan.__file__}; torch {torch.__version__}, CUDA "
      f"{torch.version.cuda}, cuda available: {torch.cuda.is_available()}"
      + (f", {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else ""))
EOF
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem \
        --format=csv || true
    return 0
}

case "$step" in
prepare)
    # HERE: pydantic's wheels for the device's Python 3.12 (x86-64), into .whl/ (kept out of git)
    mkdir -p "$WHEELS" "$ROOT/.git/info"
    grep -qx '/.whl/' "$ROOT/.git/info/exclude" 2>/dev/null || echo '/.whl/' >> "$ROOT/.git/info/exclude"
    # shellcheck disable=SC2086
    "$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$WHEELS" $WHEEL_PINS || exit 1
    ls -la "$WHEELS"
    echo "next: device call 1 = 'bash benchmarks/gpu_campaign.sh profile' with carry [\".whl\"]"
    ;;
next)
    # DEVICE, one call (< 8 min): GPT-2 small's budget with the offloading candidates (compile_under_budget(
    # offload=True)) at PyTorch's fraction 0.1 (hard limit NEXT_BUDGET_S, default 420 s), as the H100 session of
    # 2026-11-28 ran it after `issue27`; now also saving the offloading chain and every executed transfer schedule
    # (offload_plans_gpt2.json): two joint-DP rows measured 172 MiB below their replay there
    OFFLOAD_EXEC_S=0 OFFLOAD_BUDGET_S=${NEXT_BUDGET_S:-420} OFFLOAD_FRACTIONS=${NEXT_FRACTIONS:-0.1} \
        exec bash "$0" offload
    ;;
spikes-offload)
    # DEVICE, one call (< 7 min; `next` as the H200 session of 2026-11-27 ran it): what the H100 sessions of
    # 2026-11-27 left open, most telling first.
    # (1) issue 27: what slows some samples of ResNet-50 b32's sequential plans, and how much of the gap to
    # PyTorch the holds' hooks are (gpu_step_spikes, hard limit NEXT_SPIKES_S, default 150 s); (2) issue 28: paper
    # 001's schedules and the joint DP with the executor that frees each offloaded storage where its copy
    # ends (OffloadPlan.release_boundaries): requested and allocated peaks against predicted_peak_stream, the
    # step times (hard limit NEXT_OFFLOAD_S, default 170 s). With time left, chain `gpt2-low` at fraction 0.1
    # alone (GPT2_LOW_FRACTIONS=0.1, timeout_s 470): GPT-2's budget below PyTorch's 0.3, not reached so far.
    SPIKES_S=${NEXT_SPIKES_S:-150} bash "$0" spikes || true
    OFFLOAD_EXEC_S=${NEXT_OFFLOAD_S:-170} OFFLOAD_BUDGET_S=0 exec bash "$0" offload
    ;;
offload-budget)
    # DEVICE (< 9.5 min): `next` as it was after 2026-11-27's fourth session: the fixed offloading executor, then
    # GPT-2's budget at PyTorch's fraction 0.1 with the offloading candidates (--offload)
    OFFLOAD_EXEC_S=${NEXT_OFFLOAD_S:-170} OFFLOAD_BUDGET_S=${NEXT_BUDGET_S:-370} OFFLOAD_FRACTIONS=${NEXT_FRACTIONS:-0.1} \
        exec bash "$0" offload
    ;;
r50)
    # DEVICE, one call (< 9.5 min): what the H100 runs of 2026-11-26 (third session) left open; run as `next`
    # on 2026-11-27 (benchmarks/results/*_2026-11-27.*).
    # (1) ResNet-50 b32's executed plans again: the executor no longer synchronizes per step (memplan's rows
    # had paid a drained queue that PyTorch's did not once samples held 5 steps), issue 27's 3% store-all
    # gap and 5% time model (hard limit 150 s); (2) ResNet-50's budget with time for the compiled stages
    # (100 s was not enough: fraction 0.5 compiled in 51 s, then the stages) at PyTorch's 0.5 and 1, in
    # what is left of NEXT_TOTAL_S. Paper 001's schedules with the fixed conversion: the offload step.
    mkdir -p "$OUTDIR" "$WORK"
    {
        t0=$(date +%s)
        setup_env || exit 3
        log "runtime check ResNet-50 on cuda, several steps per timed sample, no synchronize per step (hard limit 150 s)"
        PYTHONUNBUFFERED=1 timeout 150 "$PY" -m memplan.experiments.runtime_check --device cuda --models resnet50 \
            --out "$OUTDIR/runtime_gpu_resnet50.csv" --throughput "$OUTDIR/throughput_gpu_resnet50.csv" \
            --traces "$OUTDIR/runtime_traces_resnet50.json" --max-rounds 40 --timing-budget 80 --holds peak
        log "runtime_check exit status $?"
        left=$(( ${NEXT_TOTAL_S:-560} - ($(date +%s) - t0) ))
        log "bench_budget ResNet-50 on cuda (hard limit $left s)"
        PYTHONUNBUFFERED=1 timeout "$left" "$PY" "$ROOT/benchmarks/bench_budget.py" --device cuda --backend inductor \
            --networks resnet50 --fractions "${NEXT_FRACTIONS:-0.5,1}" --search-time-limit $(( left - 110 )) \
            --deadline $(( left - 20 )) --timing-budget 30 --max-rounds 30 --out "$OUTDIR/bench_budget_gpu_resnet50.csv"
        log "bench_budget exit status $?"
        log "done"
    } 2>&1 | tee "$OUTDIR/campaign_next.log"
    ;;
spikes)
    # DEVICE (< 3 min): what slows some samples of ResNet-50 b32's sequential plans (issue 27: the fastest samples
    # are within 3% of every plan's prediction, the medians of memplan's sequential 2-19% above): every sample
    # dissected (per-step CUDA events, host return times, garbage collections, allocator counters), autograd,
    # store-all, sequential(k) and checkpoint_sequential(k) for k = 4, 8, in rotating rounds
    mkdir -p "$OUTDIR" "$WORK"
    {
        setup_env || exit 3
        log "gpu_step_spikes resnet50 b32 on cuda (hard limit ${SPIKES_S:-150} s)"
        PYTHONUNBUFFERED=1 timeout "${SPIKES_S:-150}" "$PY" "$ROOT/benchmarks/gpu_step_spikes.py" --device cuda \
            --network resnet50 --batch 32 --segments 4,8 --rounds 40 --steps 4 --budget $(( ${SPIKES_S:-150} - 50 )) \
            --out "$OUTDIR/step_spikes_gpu_resnet50.csv"
        log "gpu_step_spikes exit status $?"
        log "done"
    } 2>&1 | tee "$OUTDIR/campaign_spikes.log"
    ;;
gpt2-low)
    # DEVICE (< 8 min): GPT-2 small's budget at PyTorch's fractions 0.3 and 0.1, which the third H100 session's
    # 230 s search did not reach (1, 0.2, 0.5 were measured: memplan -0.6% within the noise, +1.6%, equal)
    mkdir -p "$OUTDIR" "$WORK"
    {
        setup_env || exit 3
        # GPT2_LOW_S: the hard limit (default 440 s), to fit what is left of a session's device time
        hl=${GPT2_LOW_S:-440}
        if [ "$hl" -lt 230 ]; then      # the search gets hl - 190 s: below 40 s it would be refused at once
            log "GPT2_LOW_S=$hl: too short (the search needs hl - 190 >= 40 s); give at least 230, or skip gpt2-low"
            exit 2
        fi
        log "bench_budget GPT-2 small on cuda, fractions ${GPT2_LOW_FRACTIONS:-0.3,0.1} (hard limit $hl s)"
        PYTHONUNBUFFERED=1 timeout "$hl" "$PY" "$ROOT/benchmarks/bench_budget.py" --device cuda --backend inductor \
            --networks gpt2 --fractions "${GPT2_LOW_FRACTIONS:-0.3,0.1}" --search-time-limit $(( hl - 190 )) \
            --deadline $(( hl - 20 )) --timing-budget 40 \
            --max-rounds 20 --out "$OUTDIR/bench_budget_gpu_gpt2_low.csv"
        log "bench_budget exit status $?"
        log "done"
    } 2>&1 | tee "$OUTDIR/campaign_gpt2_low.log"
    ;;
offload)
    # DEVICE (< 9 min): paper 001's offloading schedules executed on the GPU (models.runtime_offload's CUDA path,
    # first run on an H100 on 2026-11-26): gradients, the caching allocator's peak against the simulator's, the step time against
    # the simulated makespan with the measured host link (GPT-2 small b8 s1024); then GPT-2's budget with the
    # offloading candidates (compile_under_budget(offload=True)) beside PyTorch's fractions 1, 0.2, 0.5
    mkdir -p "$OUTDIR" "$WORK"
    {
        setup_env || exit 3
        # OFFLOAD_EXEC_S / OFFLOAD_BUDGET_S: the two hard limits (a short second call: OFFLOAD_BUDGET_S=0 skips the
        # budget); OFFLOAD_FRACTIONS: PyTorch's fractions measured beside the budget's rows
        he=${OFFLOAD_EXEC_S:-200}
        if [ "$he" -gt 0 ]; then       # OFFLOAD_EXEC_S=0 skips the executor's rows
            log "bench_offload_exec gpt2 on cuda (hard limit $he s)"
            PYTHONUNBUFFERED=1 timeout "$he" "$PY" "$ROOT/benchmarks/bench_offload_exec.py" --device cuda --network gpt2 \
                --timing-budget $(( he / 4 )) --out "$OUTDIR/offload_exec_gpu_gpt2.csv"
            log "bench_offload_exec exit status $?"
        fi
        hb=${OFFLOAD_BUDGET_S:-320}
        [ "$hb" -le 0 ] && { log "done"; exit 0; }
        log "bench_budget gpt2 --offload on cuda, fractions ${OFFLOAD_FRACTIONS:-1,0.2,0.5} (hard limit $hb s)"
        PYTHONUNBUFFERED=1 timeout "$hb" "$PY" "$ROOT/benchmarks/bench_budget.py" --device cuda --backend inductor \
            --networks gpt2 --offload --fractions "${OFFLOAD_FRACTIONS:-1,0.2,0.5}" --search-time-limit $(( hb - 170 )) \
            --deadline $(( hb - 20 )) --timing-budget 25 --save-offload "$OUTDIR/offload_plans" \
            --max-rounds 20 --out "$OUTDIR/bench_budget_gpu_offload.csv"
        log "bench_budget exit status $?"
        log "done"
    } 2>&1 | tee "$OUTDIR/campaign_offload.log"
    ;;
issue27)
    # DEVICE, one call (< 5.5 min with its start): issue 27's GPU items. (1) ResNet-50 b32's executed plans with
    # runtime_check (the turn model, the own-overhead peaks, store-all against autograd; since 2026-11-28 store-all
    # runs without the executor's general loop, and since the 2026-11-28 evening every timed plan holds only at its
    # peak, timed_peak checking its peak; hard limit CHECK_S, default 150 s); (2) gpu_step_spikes: store-all and
    # sequential held at their peak, with every B held and with none, beside autograd and checkpoint_sequential,
    # paired (hard limit SPIKES_S,
    # default 120 s; 0 skips it); with CHECK_GPT2_S >= 150 (default 0) runtime_check on GPT-2 small too, after
    # ResNet-50 (the executor changed on the 2026-11-28 evening; GPT-2 met every target that morning); (3) with REPROFILE_S > 0 (default 0: done on 2026-11-28), the six shipped GPU
    # chains profiled again with the turn model (no setting started after REPROFILE_S - 40 s). Then, warm, `next`
    # with what is left (NEXT_BUDGET_S >= 230). Its runtime_checks keep `--holds peak` (paper 004's model, the
    # path checked on an H100); `next` runs the default since 2026-11-29, `--holds auto` (without holds, planned
    # in models.remat.free_backward_chain, where the profile has the free record), not yet run on a GPU.
    # With AMP_S >= 120 (default 0), ResNet-50 b32 again under torch.autocast(bfloat16) (2 files more: with
    # CHECK_GPT2_S too, 10 files, over the 8 that come back; give one of the two).
    mkdir -p "$OUTDIR" "$WORK"
    {
        setup_env || exit 3
        hc=${CHECK_S:-150}
        log "runtime check ResNet-50 on cuda (hard limit $hc s)"
        PYTHONUNBUFFERED=1 timeout "$hc" "$PY" -m memplan.experiments.runtime_check --device cuda --models resnet50 \
            --out "$OUTDIR/runtime_gpu_resnet50.csv" --throughput "$OUTDIR/throughput_gpu_resnet50.csv" \
            --traces "$OUTDIR/runtime_traces_resnet50.json" --max-rounds 40 --timing-budget $(( hc - 70 )) --holds peak
        log "runtime_check exit status $?"
        hg=${CHECK_GPT2_S:-0}          # GPT-2 small b8 s1024 too (>= 150 s; 0, the default, skips it)
        if [ "$hg" -ge 150 ]; then
            log "runtime check GPT-2 small on cuda (hard limit $hg s)"
            PYTHONUNBUFFERED=1 timeout "$hg" "$PY" -m memplan.experiments.runtime_check --device cuda --models gpt2 \
                --out "$OUTDIR/runtime_gpu_gpt2.csv" --throughput "$OUTDIR/throughput_gpu_gpt2.csv" \
                --traces "$OUTDIR/runtime_traces_gpt2.json" --max-rounds 20 --timing-budget $(( hg - 100 )) --holds peak
            log "runtime_check gpt2 exit status $?"
        fi
        ha=${AMP_S:-0}          # ResNet-50 b32 under bfloat16 autocast (>= 120 s; 0, the default, skips it):
        if [ "$ha" -ge 120 ]; then   # the executor without autocast's weight cache (session 39), not yet on a GPU
            log "runtime check ResNet-50 under torch.autocast(bfloat16) on cuda (hard limit $ha s)"
            PYTHONUNBUFFERED=1 timeout "$ha" "$PY" -m memplan.experiments.runtime_check --device cuda --models resnet50 \
                --autocast bfloat16 --out "$OUTDIR/runtime_gpu_resnet50_bf16.csv" \
                --throughput "$OUTDIR/throughput_gpu_resnet50_bf16.csv" --max-rounds 40 --timing-budget $(( ha - 70 )) \
                --holds peak
            log "runtime_check bfloat16 exit status $?"
        fi
        hs=${SPIKES_S:-120}
        if [ "$hs" -gt 0 ]; then
            log "gpu_step_spikes resnet50 b32 on cuda (hard limit $hs s)"
            PYTHONUNBUFFERED=1 timeout "$hs" "$PY" "$ROOT/benchmarks/gpu_step_spikes.py" --device cuda \
                --network resnet50 --batch 32 --segments 4,8 --rounds 40 --steps 4 --budget $(( hs - 50 )) \
                --out "$OUTDIR/step_spikes_gpu_resnet50.csv"
            log "gpu_step_spikes exit status $?"
        fi
        hr=${REPROFILE_S:-0}
        if [ "$hr" -gt 0 ]; then
            log "profiles of the six GPU chains with the turn model (hard limit $hr s)"
            PYTHONUNBUFFERED=1 timeout "$hr" "$PY" -m memplan.experiments.gpu_profile --device cuda --turns --force \
                --models resnet50-b32-224,gpt2-small-b8-s1024,resnet101-b32-224,resnet50-b8-224,resnet18-b8-1000,densenet121-b32-224 \
                --out "$WORK/instances" --summary "$OUTDIR/gpu_profile_summary.csv" --host-link-json "$OUTDIR/host_link.json" \
                --tar "$OUTDIR/instances_gpu.tar.gz" --budget $(( hr - 40 ))
            log "gpu_profile exit status $?"
            if [ ! -f "$OUTDIR/instances_gpu.tar.gz" ] && ls "$WORK"/instances/*.json >/dev/null 2>&1; then
                tar -czf "$OUTDIR/instances_gpu.tar.gz" -C "$WORK" instances && log "bundled what was written"
            fi
        fi
        log "done"
    } 2>&1 | tee "$OUTDIR/campaign_issue27.log"
    ;;
reprofile)
    # DEVICE (< 8 min): issue 27's item 6, the six chains shipped as instances/*-h200.json profiled again with
    # today's profiler (cuts where autograd saves, times in context), as <setting>-<gpu>.json
    PROFILE_ARGS="--models resnet50-b32-224,resnet101-b32-224,gpt2-small-b8-s1024,densenet121-b32-224,resnet50-b8-224,resnet18-b8-1000 ${PROFILE_ARGS:-}" \
        exec bash "$0" profile
    ;;
profile)
    # DEVICE call 1 (< 9 min): host link, the 17 instances, torchvision check
    mkdir -p "$OUTDIR" "$WORK"
    LOGF="$OUTDIR/campaign_profile.log"
    {
        setup_env || exit 3
        log "torchvision check + profiles (budget 400 s; hard limit 480 s)"
        # shellcheck disable=SC2086
        PYTHONUNBUFFERED=1 timeout 480 "$PY" -m memplan.experiments.gpu_profile --device cuda \
            --out "$WORK/instances" --summary "$OUTDIR/gpu_profile_summary.csv" \
            --host-link-json "$OUTDIR/host_link.json" --torchvision "$OUTDIR/torchvision_check.csv" \
            --tar "$OUTDIR/instances_gpu.tar.gz" --budget 400 ${PROFILE_ARGS:-}
        rc=$?
        log "gpu_profile exit status $rc"
        if [ ! -f "$OUTDIR/instances_gpu.tar.gz" ] && ls "$WORK"/instances/*.json >/dev/null 2>&1; then
            tar -czf "$OUTDIR/instances_gpu.tar.gz" -C "$WORK" instances && log "bundled what was written"
        fi
        log "pytest (torchvision test) on the device"
        timeout 40 "$PY" -m pytest -q -p no:cacheprovider "$ROOT/tests/test_torchvision_zoo.py" 2>&1 | tail -n 15
        log "done"
    } 2>&1 | tee "$LOGF"
    ;;
runtime)
    # DEVICE call 2 (< 9 min): plans executed on the GPU, paper 004's comparison, the CUDA tests
    mkdir -p "$OUTDIR" "$WORK"
    LOGF="$OUTDIR/campaign_runtime.log"
    {
        setup_env || exit 3
        log "runtime check (budget 330 s; hard limit 420 s)"
        # shellcheck disable=SC2086
        PYTHONUNBUFFERED=1 timeout 420 "$PY" -m memplan.experiments.runtime_check --device cuda \
            --out "$OUTDIR/runtime_gpu.csv" --throughput "$OUTDIR/throughput_gpu.csv" \
            --traces "$OUTDIR/runtime_traces.json" --budget 330 --max-rounds 20 --timing-budget 45 ${RUNTIME_ARGS:-}
        log "runtime_check exit status $?"
        log "pytest: the CUDA tests (runtime executor, dry runs on cuda)"
        timeout 90 "$PY" -m pytest -q -p no:cacheprovider "$ROOT/tests/test_runtime.py" "$ROOT/tests/test_gpu_scripts.py" \
            -k "cuda" 2>&1 | tail -n 20
        log "done"
    } 2>&1 | tee "$LOGF"
    ;;
budget)
    # DEVICE call 3 (< 9 min): issue 28 on the GPU, torch.compile's budget against memplan at the same peak
    mkdir -p "$OUTDIR" "$WORK"
    LOGF="$OUTDIR/campaign_budget.log"
    {
        setup_env || exit 3
        log "bench_budget on cuda (110 s of compiles and 30 s of timing per network; hard limit 500 s)"
        # shellcheck disable=SC2086
        PYTHONUNBUFFERED=1 timeout 500 "$PY" "$ROOT/benchmarks/bench_budget.py" --device cuda --backend inductor \
            --networks "${BUDGET_NETWORKS:-gpt2,resnet50}" --search-time-limit 110 --timing-budget 30 \
            --max-rounds 30 --out "$OUTDIR/bench_budget_gpu.csv" ${BUDGET_ARGS:-}
        log "bench_budget exit status $?"
        log "done"
    } 2>&1 | tee "$LOGF"
    ;;
both)
    # DEVICE, one call (< 9 min) for a session lent 15 minutes: issue 28's budget (GPT-2 small, ResNet-50;
    # hard limit BOTH_BUDGET_S, default 290 s), then issue 27's executed plans and paper 004's comparison
    # (ResNet-50 b32, GPT-2 small b8 s1024) in what is left of BOTH_TOTAL_S (default 520 s)
    mkdir -p "$OUTDIR" "$WORK"
    LOGF="$OUTDIR/campaign_both.log"
    {
        t0=$(date +%s)
        setup_env || exit 3
        hb=${BOTH_BUDGET_S:-290}
        log "bench_budget on cuda (60 s of compiles and 12 s of timing per network; hard limit $hb s)"
        # shellcheck disable=SC2086
        PYTHONUNBUFFERED=1 timeout "$hb" "$PY" "$ROOT/benchmarks/bench_budget.py" --device cuda --backend inductor \
            --networks "${BUDGET_NETWORKS:-gpt2,resnet50}" --search-time-limit 60 --timing-budget 12 \
            --max-rounds 20 --out "$OUTDIR/bench_budget_gpu.csv" ${BUDGET_ARGS:-}
        log "bench_budget exit status $?"
        left=$(( ${BOTH_TOTAL_S:-520} - ($(date +%s) - t0) ))
        rb=$(( left > 140 ? left - 110 : 30 ))
        log "runtime check (hard limit $left s; no network started after $rb s)"
        # shellcheck disable=SC2086
        PYTHONUNBUFFERED=1 timeout "$left" "$PY" -m memplan.experiments.runtime_check --device cuda \
            --models "${RUNTIME_MODELS:-resnet50,gpt2}" \
            --out "$OUTDIR/runtime_gpu.csv" --throughput "$OUTDIR/throughput_gpu.csv" \
            --traces "$OUTDIR/runtime_traces.json" --budget "$rb" --max-rounds 20 --timing-budget 25 ${RUNTIME_ARGS:-}
        log "runtime_check exit status $?"
        log "done"
    } 2>&1 | tee "$LOGF"
    ;;
unpack)
    # HERE: FILES = the folder the device tool copied $OUT into (files_at)
    FILES=${2:?usage: gpu_campaign.sh unpack FOLDER_WITH_THE_CALL_S_FILES}
    mkdir -p "$ROOT/benchmarks/results"
    if [ -f "$FILES/instances_gpu.tar.gz" ]; then
        # an instance file already in instances/ is kept (remove it first to replace it)
        for f in $(tar -tzf "$FILES/instances_gpu.tar.gz"); do
            [ -e "$ROOT/$f" ] && echo "kept, already there: $f"
        done
        tar -xzf "$FILES/instances_gpu.tar.gz" -C "$ROOT" --skip-old-files
        for f in $(tar -tzf "$FILES/instances_gpu.tar.gz"); do
            memplan show "$ROOT/$f" --rows 4 >/dev/null && echo "loads: $f" || echo "DOES NOT LOAD: $f"
        done
    fi
    for f in runtime_gpu.csv throughput_gpu.csv runtime_traces.json gpu_profile_summary.csv torchvision_check.csv \
        host_link.json bench_budget_gpu.csv bench_budget_gpu.txt campaign_both.log campaign_budget.log campaign_runtime.log \
        campaign_next.log bench_budget_gpu_gpt2.csv bench_budget_gpu_gpt2.txt timing_noise_gpu.csv \
        runtime_gpu_resnet50.csv throughput_gpu_resnet50.csv runtime_traces_resnet50.json \
        runtime_gpu_gpt2.csv throughput_gpu_gpt2.csv runtime_traces_gpt2.json \
        offload_exec_gpu_gpt2.csv offload_exec_gpu_quick.csv bench_budget_gpu_offload.csv bench_budget_gpu_offload.txt offload_plans_gpt2.json campaign_offload.log \
        bench_budget_gpu_resnet50.csv bench_budget_gpu_resnet50.txt bench_budget_gpu_gpt2_low.csv bench_budget_gpu_gpt2_low.txt \
        campaign_gpt2_low.log campaign_issue27.log step_spikes_gpu_resnet50.csv step_spikes_gpu_resnet50.txt campaign_spikes.log; do
        # dated copies (name_YYYY-MM-DD.ext, UTC; SUFFIX as the third argument), so that a later run does not
        # overwrite the files the README cites for an earlier one
        [ -f "$FILES/$f" ] && cp -v "$FILES/$f" "$ROOT/benchmarks/results/${f%.*}_${3:-$(date -u +%F)}.${f##*.}"
    done
    echo "logs are ignored by git (*.log): add them with 'git add -f'"
    echo "paper 003's sweeps from the GPU instances (CPU, 25-60 min each), e.g.:"
    for n in resnet18-b8-1000 resnet50-b8-224; do
        g=$(ls "$ROOT"/instances/$n-*.json 2>/dev/null | grep -v -- -cpu.json | head -n 1)
        [ -n "$g" ] && echo "  python -m memplan.experiments.pipeline_figures --instance ${g#$ROOT/} --bandwidth 12GB/s" \
            "--gpus 4 8 --points 6 --time-limit 60 --periodicity 2"
    done
    ;;
dry-run)
    # HERE, without a GPU: both calls' Python commands on the CPU, tiny settings, into a scratch folder
    D=${2:-$(mktemp -d)}
    setup_env || exit 3
    t0=$(date +%s)
    "$PY" -m memplan.experiments.gpu_profile --device cpu --quick --threads 1 --out "$D/instances" \
        --summary "$D/gpu_profile_summary.csv" --host-link-json "$D/host_link.json" --tar "$D/instances_gpu.tar.gz" \
        || exit 1
    t1=$(date +%s)
    "$PY" -m memplan.experiments.runtime_check --device cpu --quick --out "$D/runtime_gpu.csv" \
        --throughput "$D/throughput_gpu.csv" --traces "$D/runtime_traces.json" || exit 1
    "$PY" -m memplan.experiments.runtime_check --device cpu --quick --models resnet18 --autocast bfloat16 \
        --out "$D/runtime_gpu_resnet50_bf16.csv" --throughput "$D/throughput_gpu_resnet50_bf16.csv" || exit 1
    t2=$(date +%s)
    "$PY" "$ROOT/benchmarks/bench_budget.py" --quick --networks llama --fractions 1,0.2 --deadline 60 \
        --out "$D/bench_budget_gpu.csv" || exit 1
    t3=$(date +%s)
    "$PY" "$ROOT/benchmarks/gpu_timing_noise.py" --device cpu --network resnet18 --batch 2 --size 32 --runs 6 \
        --out "$D/timing_noise_gpu.csv" || exit 1
    t4=$(date +%s)
    "$PY" "$ROOT/benchmarks/bench_offload_exec.py" --device cpu --quick --network gpt2 --fixed-times \
        --out "$D/offload_exec_gpu_gpt2.csv" \
        || exit 1
    t5=$(date +%s)
    "$PY" "$ROOT/benchmarks/gpu_step_spikes.py" --device cpu --network resnet18 --batch 2 --size 32 --rounds 3 \
        --steps 2 --out "$D/step_spikes_gpu_resnet50.csv" || exit 1
    t6=$(date +%s)
    echo "dry run in $D: profile step $((t1 - t0)) s, runtime step $((t2 - t1)) s, budget step $((t3 - t2)) s," \
        "noise step $((t4 - t3)) s, offload step $((t5 - t4)) s, spikes step $((t6 - t5)) s"
    ;;
*)
    sed -n '2,24p' "$0"
    ;;
esac
