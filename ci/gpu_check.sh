#!/bin/bash
# ci/gpu_check.sh: validate the CUDA plug-in on a lent GPU machine from the kit ci/gpu_kit.sh built (no build, no
# network): one device call, `bash ci/gpu_check.sh` with carry [".gpu"] (backends/cuda/README.md). Each step runs
# under its own timeout, all of it within FSC_GPU_BUDGET seconds (default 400):
#   setup     unpack the kit; find the CUDA libraries (/usr/local/cuda or the pip wheels); register with ldconfig
#             the folders and the kit libraries the machine lacks; every kit binary must resolve every library
#   versions  card, driver, CUDA, cuBLAS, NCCL, PyTorch
#   gpu       a GPU is there (nvidia-smi, the driver library): without one, "no GPU" and stop (exit 3)
#   a harness every device-table entry against the CPU, twice with one seed: the second run's bits equal the first's
#   b models   GPT-2 and Llama, 20 steps on --device $DEV against --device cpu, f32 and bf16, stated tolerances
#   c ranks    simulated ranks on the GPU (--world 4): fsdp with every shard strategy, zero1, zero2, a pipeline and
#             offload optim/all equal to DDP bit for bit (--check-ddp)
#   d launch   the launcher at world 1 with NCCL equals the simulated rank; checkpoints cross between GPU and CPU
#   f speed    GPT-2 124M and a Llama of 1.1B in bf16 with fp32 masters: tokens/s, MFU, memory per tag, with full
#             f32 products and with TF32 ones (FSC_CUDA_TF32=1), beside PyTorch eager and torch.compile on the card
#   g profile  ncu's time of every kernel of a GPT-2 124M step (TF32 products), summed per kernel name (the top 15)
#   e sanitize compute-sanitizer memcheck of the harness, racecheck of a short run
# (e runs last: it is the slowest and the speed numbers matter more.) A GPU test that skips counts as a failure.
# Writes to $OUT (the device tool's folder; /tmp/fsc-gpu-out elsewhere): summary.txt (a line per step: ok or
# FAILED, seconds, its key numbers) and logs.tar.gz (every step's log). Exit status: 0 when every step passed,
# 3 when there is no GPU (after the steps that need none), 1 otherwise.
# Environment: FSC_KIT (default .gpu), FSC_GPU_BUDGET (seconds), FSC_GPU_STEPS (names to run, default all),
# FSC_GPU_SPEED_STEPS (fsc-train's steps in the speed step, default 5 for GPT-2 and 3 for the 1.1B Llama),
# FSC_GPU_COMPILE (the models torch.compile is timed for, default "gpt": the 1.1B model's compile and fsc's 8.5 s
# steps do not fit the budget together),
# FSC_GPU_PROFILE_LAUNCHES (kernels ncu times in the profile step, default 3000),
# FSC_GPU_REHEARSE=1: a rehearsal on a machine without a GPU (--device cpu for cuda, tiny speed shapes, the
# GPU-only steps skipped), to check this script itself before the GPU's minutes are spent.
set -u
ulimit -c 0  # a crashing CUDA program dumps a core of its whole mapped address space, for minutes
cd "$(dirname "$0")/.."
ROOT=$PWD
KIT=${FSC_KIT:-$ROOT/.gpu}
OUT=${OUT:-/tmp/fsc-gpu-out}
BUDGET=${FSC_GPU_BUDGET:-400}
ONLY=${FSC_GPU_STEPS:-}
export PATH=$PATH:/usr/local/nvidia/bin
mkdir -p "$OUT"
W=$(mktemp -d /tmp/fsc-kit.XXXXXX)
L=$W/logs
mkdir -p "$L"
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
START=$(date +%s)
FAILS=0

say() { echo "$*" | tee -a "$SUMMARY"; }
finish() {
    # checkpoints stay behind: the device tool returns files of at most 16 MiB
    tar -C "$W" --exclude='ck-*' --exclude='*.safetensors' -czf "$OUT/logs.tar.gz" logs 2>/dev/null
    rm -rf "$W"
    say "total: $(( $(date +%s) - START )) s, $FAILS step(s) failed"
    exit "$1"
}

# step NAME SECONDS FUNCTION: run FUNCTION with its output in $L/NAME.log under a timeout (the smaller of SECONDS
# and what is left of the budget); FUNCTION writes its key numbers to $KEYS. One summary line per step.
step() {
    local name=$1 limit=$2 fn=$3
    if [ -n "$ONLY" ] && ! echo " $ONLY " | grep -q " $name "; then return 0; fi
    local left=$(( BUDGET - ( $(date +%s) - START ) ))
    [ "$left" -lt "$limit" ] && limit=$left
    if [ "$limit" -le 5 ]; then
        say "$name FAILED 0s not run: the budget of ${BUDGET}s is spent"
        FAILS=$((FAILS + 1))
        return 1
    fi
    KEYS=$L/$name.keys
    : > "$KEYS"
    local t0 rc
    t0=$(date +%s)
    echo "== $name (at most ${limit}s)"
    export KEYS L
    timeout -k 5 "$limit" bash -c "$(declare -f "$fn" run_fsc loss_cmp); $fn" > "$L/$name.log" 2>&1
    rc=$?
    local secs=$(( $(date +%s) - t0 )) keys
    keys=$(tr '\n' ';' < "$KEYS" | sed 's/;$//')
    if [ "$rc" -eq 0 ]; then
        say "$name ok ${secs}s $keys"
    else
        [ "$rc" -eq 124 ] && keys="timed out after ${limit}s; $keys"
        say "$name FAILED ${secs}s rc=$rc $keys"
        tail -n 15 "$L/$name.log" | sed 's/^/    /'
        FAILS=$((FAILS + 1))
    fi
    return "$rc"
}

# ---- helpers the steps use (exported into each step's shell by declare -f) ----

# run_fsc NAME ARGS...: fsc-train with its output in $L/NAME.out and its --json line in $L/NAME.json
run_fsc() {
    local name=$1
    shift
    "$K/bin/fsc-train" "$@" > "$L/$name.out" 2>&1
    local rc=$?
    tail -n 1 "$L/$name.out" | grep '^{' > "$L/$name.json"
    echo "fsc-train $* -> rc $rc"
    [ "$rc" -ne 0 ] && tail -n 5 "$L/$name.out"
    return $rc
}
# loss_cmp A.json B.json BOUND: max over steps of |a - b| / |b| <= BOUND; prints it
loss_cmp() {
    python3 - "$1" "$2" "$3" <<'PY'
import json, sys
a, b = (json.load(open(p))["losses"] for p in sys.argv[1:3])
bound = float(sys.argv[3])
if len(a) != len(b) or any(x is None for x in a + b):
    print("losses missing or not finite"); sys.exit(1)
err = max(abs(x - y) / abs(y) for x, y in zip(a, b))
print("%.3g" % err)
sys.exit(0 if err <= bound else 1)
PY
}

# ---- the steps ----

setup() {
    set -e
    tar -C "$K" -xzf "$KIT/kit.tar.gz"
    # CUDA's libraries in either layout: the toolkit's folders, or the pip wheels (nvidia/cu13/lib, nvidia/nccl/lib)
    local dirs="" d lib found
    for lib in libcublas.so.13 libcublasLt.so.13 libnccl.so.2 libcudart.so.13; do
        found=""
        for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-*/lib64 \
                 /usr/lib/x86_64-linux-gnu $(python3 -c 'import nvidia, os; print(" ".join(
                 os.path.join(p, s, "lib") for p in nvidia.__path__ for s in sorted(os.listdir(p))))' 2>/dev/null); do
            if [ -e "$d/$lib" ]; then found=$d; break; fi
        done
        if [ -z "$found" ]; then echo "$lib: not found in /usr/local/cuda or the nvidia wheels"; continue; fi
        echo "$lib: $found/$lib -> $(readlink -f "$found/$lib")"
        case " $dirs " in *" $found "*) ;; *) dirs="$dirs $found" ;; esac
    done
    # the kit's libraries the machine lacks (only those: never shadow the machine's own zlib or others)
    mkdir -p "$K/syslib"
    for f in "$K"/lib/*.so.*; do
        local so
        so=$(basename "$f")
        if ldconfig -p | grep -q "^[[:space:]]*$so "; then echo "$so: the machine has it"; else
            ln -sf "$f" "$K/syslib/$so"; echo "$so: from the kit"; fi
    done
    if [ "$REHEARSE" = 1 ]; then  # leave this machine's loader alone
        export LD_LIBRARY_PATH=$K/syslib
    else
        { for d in $dirs; do echo "$d"; done; echo "$K/syslib"; } > /etc/ld.so.conf.d/zz-fsc-kit.conf
        ldconfig
        echo "registered with ldconfig:"; sed 's/^/  /' /etc/ld.so.conf.d/zz-fsc-kit.conf
    fi
    # every kit binary resolves every library, none from outside the system, CUDA or the kit
    local missing=0 b
    for b in "$K"/bin/* "$K/lib/libfsc_cuda.so"; do
        if ldd "$b" | grep -q "not found"; then ldd "$b" | grep "not found" | sed "s|^|$(basename "$b"): |"; missing=1; fi
    done
    [ "$missing" -eq 0 ]
    echo "libraries: $(ls "$K/syslib" | tr '\n' ' ')from the kit; CUDA in:$dirs" >> "$KEYS"
}

versions() {
    echo "kit: $(head -2 "$KIT/MANIFEST" | tr '\n' ' ')"
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    command -v nvidia-smi >/dev/null && nvidia-smi | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/cuda (driver) \1/p'
    local so
    for so in libcublas.so.13 libnccl.so.2 libcudart.so.13; do
        echo "$so: $(readlink -f "$(ldconfig -p | awk -v s="$so" '$1 == s {print $NF; exit}')" 2>/dev/null)"
    done
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -1
    python3 -c 'import importlib.metadata as m
for p in ("nvidia-cublas", "nvidia-cublas-cu13", "nvidia-nccl-cu13", "nvidia-cuda-runtime"):
    try: print("wheel", p, m.version(p))
    except Exception: pass' 2>/dev/null
    {
        command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1
        echo "cublas $(basename "$(readlink -f "$(ldconfig -p | awk '$1 == "libcublas.so.13" {print $NF; exit}')")")"
        echo "nccl $(basename "$(readlink -f "$(ldconfig -p | awk '$1 == "libnccl.so.2" {print $NF; exit}')")")"
    } | tr '\n' ' ' >> "$KEYS"
    return 0
}

gpu() {
    if ! command -v nvidia-smi >/dev/null; then echo "no GPU: nvidia-smi is not installed" | tee -a "$KEYS"; return 1; fi
    if ! nvidia-smi -L > "$L/gpus.txt" 2>&1 || ! grep -q '^GPU ' "$L/gpus.txt"; then
        echo "no GPU: nvidia-smi lists none: $(head -1 "$L/gpus.txt")" | tee -a "$KEYS"; return 1; fi
    # the driver's library: on the loader path already (cache or LD_LIBRARY_PATH), or registered from where it is
    if ! python3 -c 'import ctypes; ctypes.CDLL("libcuda.so.1")' 2>/dev/null; then
        local d
        for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/cuda/compat; do
            [ -e "$d/libcuda.so.1" ] && { echo "$d" >> /etc/ld.so.conf.d/zz-fsc-kit.conf; ldconfig; break; }
        done
        if ! python3 -c 'import ctypes; ctypes.CDLL("libcuda.so.1")' 2>/dev/null; then
            echo "no GPU: the driver library libcuda.so.1 cannot be loaded" | tee -a "$KEYS"; return 1; fi
    fi
    echo "$(grep -c '^GPU ' "$L/gpus.txt") GPU(s): $(head -1 "$L/gpus.txt")" | tee -a "$KEYS"
}

harness() {
    local seed=$(( $(date +%s) % 1000000007 )) r
    for r in 1 2; do
        FSC_REQUIRE_GPU=1 FSC_TEST_SEED=$seed FSC_TEST_DIGEST=$L/digest$r.txt "$K/bin/test_cuda_backend" \
            > "$L/harness$r.out" 2>&1 && continue
        local rc=$?
        cat "$L/harness$r.out"
        echo "run $r failed (rc $rc): $(grep -o 'FAILED  \] [a-z_0-9]*' "$L/harness$r.out" | sed 's/.* //' | tr '\n' ' ')" >> "$KEYS"
        grep -m 3 'ERROR:\|double free\|corruption' "$L/harness$r.out" | cut -c1-200 >> "$KEYS"
        if [ "$rc" -gt 128 ] && command -v cuda-gdb >/dev/null; then  # a crash: where, from the debugger
            FSC_REQUIRE_GPU=1 FSC_TEST_SEED=$seed timeout 40 cuda-gdb -q -batch -ex run -ex bt \
                --args "$K/bin/test_cuda_backend" > "$L/harness-bt.out" 2>&1
            grep -A 14 'signal SIG' "$L/harness-bt.out"
            grep -m 8 '^#' "$L/harness-bt.out" | cut -c1-160 >> "$KEYS"
        fi
        return 1
    done
    cat "$L/harness1.out"
    echo "seed $seed; $(grep -o 'PASSED.*' "$L/harness1.out" | head -1); $(wc -l < "$L/digest1.txt") results hashed" >> "$KEYS"
    if ! cmp -s "$L/digest1.txt" "$L/digest2.txt"; then
        diff "$L/digest1.txt" "$L/digest2.txt" | head -20
        echo "the second run's bits differ from the first's" >> "$KEYS"
        return 1
    fi
    echo "second run: the same bits" >> "$KEYS"
}

# Tolerances on the losses of 20 steps, max relative difference per step: f32 1e-4 (cuBLAS and OpenBLAS sum
# in different orders, exp/tanh differ in the last bit; AdamW amplifies little over 20 steps), bf16 2e-2 (a
# rounding of a bf16 parameter copy that lands the other way changes it by 2^-8).
models() {
    local m p bound ok=0 e
    for m in gpt2 llama; do
        for p in fp32 bf16; do
            bound=1e-4; [ "$p" = bf16 ] && bound=2e-2
            run_fsc "b-$m-$p-cuda" --model $m --precision $p --steps 20 --json --device $DEV --data "$K/data/coriolanus.txt" || ok=1
            run_fsc "b-$m-$p-cpu" --model $m --precision $p --steps 20 --json --device cpu --data "$K/data/coriolanus.txt" || ok=1
            if e=$(loss_cmp "$L/b-$m-$p-cuda.json" "$L/b-$m-$p-cpu.json" $bound); then
                echo "$m $p: $e (<= $bound)" >> "$KEYS"
            else
                echo "$m $p: $e > $bound" >> "$KEYS"; ok=1
            fi
        done
    done
    # TF32 tensor cores for the f32 products (FSC_CUDA_TF32=1), bf16 parameters: within bf16's bound of the CPU
    FSC_CUDA_TF32=1 run_fsc b-gpt2-bf16-tf32 --model gpt2 --precision bf16 --steps 20 --json --device $DEV \
        --data "$K/data/coriolanus.txt" || ok=1
    if e=$(loss_cmp "$L/b-gpt2-bf16-tf32.json" "$L/b-gpt2-bf16-cpu.json" 2e-2); then
        echo "gpt2 bf16 tf32: $e (<= 2e-2)" >> "$KEYS"
    else
        echo "gpt2 bf16 tf32: $e > 2e-2" >> "$KEYS"; ok=1
    fi
    return $ok
}

ranks() {
    local ok=0 name
    local common=(--device $DEV --world 4 --steps 4 --batch 8 --check-ddp --data "$K/data/coriolanus.txt")
    for name in "fsdp --shard full" "fsdp --shard grad_op" "fsdp --shard none" "fsdp --shard hybrid" zero1 zero2 \
                "fsdp --offload optim" "fsdp --offload all" "zero2 --offload optim" "pipe --pp 2" \
                "fsdp --precision bf16" "fsdp --prefetch 0"; do
        # shellcheck disable=SC2086
        if run_fsc "c-${name// /_}" "${common[@]}" --parallel $name; then
            echo "$name: =DDP" >> "$KEYS"
        else
            echo "$name: FAILED" >> "$KEYS"; ok=1
        fi
    done
    if FSC_CUDA_TF32=1 run_fsc c-tf32 "${common[@]}" --parallel fsdp --precision bf16; then
        echo "fsdp --precision bf16 under FSC_CUDA_TF32=1: =DDP" >> "$KEYS"
    else
        echo "fsdp --precision bf16 under FSC_CUDA_TF32=1: FAILED" >> "$KEYS"; ok=1
    fi
    return $ok
}

launch() {
    local ok=0 d="$K/data/coriolanus.txt"
    run_fsc d-sim --device $DEV --parallel ddp --steps 5 --json --data "$d" || ok=1
    FSC_LAUNCHER=torchrun RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 \
        run_fsc d-nccl --device $DEV --parallel ddp --steps 5 --json --data "$d" || ok=1
    if python3 -c 'import json,sys; a,b=(json.load(open(p))["losses"] for p in sys.argv[1:]); sys.exit(a!=b)' \
        "$L/d-sim.json" "$L/d-nccl.json"; then echo "nccl world 1 = simulated rank, bit for bit" >> "$KEYS"
    else echo "nccl world 1 != simulated rank" >> "$KEYS"; ok=1; fi
    [ "$REHEARSE" = 1 ] || FSC_LAUNCHER=torchrun RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 \
        run_fsc d-native --device $DEV --parallel fsdp --reduce native --steps 3 --json --data "$d" || ok=1
    # checkpoints: 4 steps on one device, resumed for 2 more on the other, against 6 uninterrupted on the second
    local from to
    for from in $DEV cpu; do
        to=cpu; [ "$from" = cpu ] && to=$DEV
        rm -rf "$L/ck-$from"
        run_fsc "d-ck-$from" --device $from --parallel fsdp --world 2 --steps 4 --save-every 2 --ckpt-dir "$L/ck-$from" \
            --json --data "$d" || ok=1
        run_fsc "d-resume-$to" --device $to --parallel zero2 --world 2 --steps 6 --resume "$L/ck-$from" \
            --ckpt-dir "$L/ck-$from" --save-every 2 --json --data "$d" || ok=1
        run_fsc "d-straight-$to" --device $to --parallel zero2 --world 2 --steps 6 --json --data "$d" || ok=1
        local e
        # the last loss within 1e-3 of the uninterrupted run's (4 steps on the other device, then 2 here)
        if e=$(python3 -c 'import json,sys
a,b=(json.load(open(p))["losses"][-1] for p in sys.argv[1:]); e=abs(a-b)/abs(b); print("%.3g" % e); sys.exit(e > 1e-3)' \
            "$L/d-resume-$to.json" "$L/d-straight-$to.json"); then
            echo "checkpoint $from -> $to: loaded; last loss vs uninterrupted on $to: $e (<= 1e-3)" >> "$KEYS"
        else
            echo "checkpoint $from -> $to: FAILED (last loss vs uninterrupted: ${e:-none})" >> "$KEYS"; ok=1
        fi
    done
    return $ok
}

# Model FLOPs per token as llm.c counts them (the PaLM formula): 6 N + 12 L C T, the same for fsc and PyTorch.
speed() {
    local ok=0 peak=989.4   # dense bf16 TFLOP/s of an H100/H200 SXM (the datasheet's)
    local gpt=(--model gpt2 --layers 12 --dim 768 --heads 12 --seq 1024 --vocab 50257 --batch 8)
    local llama=(--model llama --layers 22 --dim 2048 --heads 32 --kv-heads 4 --ffn 5632 --seq 1024 --vocab 32000 --batch 4)
    if [ "$REHEARSE" = 1 ]; then
        gpt=(--model gpt2 --layers 2 --dim 64 --heads 4 --seq 64 --vocab 50257 --batch 2)
        llama=(--model llama --layers 2 --dim 64 --heads 4 --kv-heads 2 --ffn 192 --seq 64 --vocab 32000 --batch 2)
    fi
    local m
    for m in gpt llama; do
        local -n a=$m
        local steps=${FSC_GPU_SPEED_STEPS:-5}  # the 1.1B model: 3 steps, so that f32 and TF32 both fit the step's time
        [ "$m" = llama ] && steps=${FSC_GPU_SPEED_STEPS:-3}
        run_fsc "f-$m" "${a[@]}" --precision bf16 --device $DEV --steps "$steps" --json --peak-tflops $peak \
            --data "$K/data/random32k.u16" --data-format u16 || ok=1
        FSC_CUDA_TF32=1 run_fsc "f-$m-tf32" "${a[@]}" --precision bf16 --device $DEV --steps "$steps" \
            --json --peak-tflops $peak --data "$K/data/random32k.u16" --data-format u16 || ok=1
        python3 "$K/bench/torch_gpu.py" "${a[@]}" --steps 6 --warmup 3 > "$L/f-$m-eager.json" 2> "$L/f-$m-eager.err" \
            || { echo "torch eager did not run: $(tail -1 "$L/f-$m-eager.err")"; [ "$REHEARSE" = 1 ] || ok=1; }
        if echo " ${FSC_GPU_COMPILE-gpt} " | grep -q " $m "; then
            timeout 150 python3 "$K/bench/torch_gpu.py" "${a[@]}" --steps 6 --warmup 3 --compile > "$L/f-$m-compile.json" \
                2> "$L/f-$m-compile.err" || echo "torch.compile did not run: $(tail -1 "$L/f-$m-compile.err")"
        else
            echo "torch.compile not run for $m (FSC_GPU_COMPILE)" > "$L/f-$m-compile.err"; : > "$L/f-$m-compile.json"
        fi
        python3 - "$m" "$peak" "$L/f-$m.json" "$L/f-$m-tf32.json" "$L/f-$m-eager.json" "$L/f-$m-compile.json" "${a[@]}" \
            >> "$KEYS" <<'PY'
import json, sys
m, peak, files, args = sys.argv[1], float(sys.argv[2]), sys.argv[3:7], sys.argv[7:]
opt = dict(zip(args[0::2], args[1::2]))
L, C, T = int(opt["--layers"]), int(opt["--dim"]), int(opt["--seq"])
out = []
for name, f in zip(("fsc", "fsc tf32", "torch eager", "torch.compile"), files):
    try:
        d = json.loads(open(f).read().strip().splitlines()[-1])
    except Exception:
        out.append("%s: no result" % name); continue
    n, tps = d["params"], d["tokens_per_s"]
    mfu = (6 * n + 12 * L * C * T) * tps / (peak * 1e12)
    peaks = d["peak_bytes"]
    mem = ("total %.1f GiB (%s)" % (peaks["total"] / 2**30, ", ".join(
        "%s %.1f" % (k, v / 2**30) for k, v in peaks.items() if k != "total" and v)) if isinstance(peaks, dict)
        else "peak %.1f GiB" % (peaks / 2**30))
    out.append("%s: %.0f tok/s, %.1f ms/step, MFU %.1f%%, %s" % (name, tps, d["ms_per_step"], 100 * mfu, mem))
print("%s (%s params): %s" % (m, "{:,}".format(json.loads(open(files[0]).read().strip().splitlines()[-1])["params"])
      if out[0].find("no result") < 0 else "?", " | ".join(out)))
PY
    done
    return $ok
}

# Where the GPU time of a GPT-2 124M step goes: ncu times every kernel of the first launches of a 2-step run
# (one metric, clocks left alone), summed per kernel name; the top ones go to the summary.
profile() {
    command -v ncu >/dev/null || { echo "no ncu on this machine" | tee -a "$KEYS"; return 1; }
    local gpt=(--model gpt2 --layers 12 --dim 768 --heads 12 --seq 1024 --vocab 50257 --batch 8)
    FSC_CUDA_TF32=1 ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw \
        --launch-count "${FSC_GPU_PROFILE_LAUNCHES:-3000}" "$K/bin/fsc-train" "${gpt[@]}" --precision bf16 \
        --device $DEV --steps 2 --data "$K/data/random32k.u16" --data-format u16 > "$L/ncu.csv" 2> "$L/ncu.err"
    local rc=$?
    python3 "$ROOT/ci/ncu_summary.py" "$L/ncu.csv" 15 | tee -a "$KEYS"
    [ "$rc" -eq 0 ] || { tail -5 "$L/ncu.err"; return 1; }
}

sanitize() {
    local ok=0
    FSC_REQUIRE_GPU=1 FSC_CUDA_NO_CACHE=1 compute-sanitizer --tool memcheck --error-exitcode 9 \
        "$K/bin/test_cuda_backend" > "$L/memcheck.out" 2>&1 && echo "memcheck of the harness: clean" >> "$KEYS" \
        || { echo "memcheck: errors (rc $?)" >> "$KEYS"; ok=1; }
    tail -n 30 "$L/memcheck.out"
    FSC_CUDA_NO_CACHE=1 compute-sanitizer --tool racecheck --error-exitcode 9 "$K/bin/fsc-train" --device $DEV \
        --steps 2 --layers 2 --data "$K/data/coriolanus.txt" > "$L/racecheck.out" 2>&1 \
        && echo "racecheck of 2 training steps: clean" >> "$KEYS" || { echo "racecheck: errors (rc $?)" >> "$KEYS"; ok=1; }
    tail -n 30 "$L/racecheck.out"
    return $ok
}

export K=$W/kit KIT ROOT DEV=cuda REHEARSE=${FSC_GPU_REHEARSE:-0}
[ "$REHEARSE" = 1 ] && DEV=cpu
mkdir -p "$K"
export FSC_CUDA_PLUGIN=$K/lib/libfsc_cuda.so OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-8}
if [ ! -f "$KIT/kit.tar.gz" ]; then
    say "setup FAILED 0s no kit at $KIT/kit.tar.gz: run ci/gpu_kit.sh here first and carry [\".gpu\"]"
    FAILS=1
    finish 1
fi
say "fsc gpu_check on $(hostname) $(date -u +%Y-%m-%dT%H:%M:%SZ), budget ${BUDGET}s"
step setup 60 setup || finish 1
step versions 30 versions
if [ "$REHEARSE" = 1 ]; then
    say "rehearsal: --device cpu for cuda; the gpu, harness and sanitize steps are skipped; tiny speed shapes"
    step models 90 models
    step ranks 90 ranks
    step launch 60 launch
    step speed 260 speed
    [ "$FAILS" -eq 0 ] && finish 0
    finish 1
fi
step gpu 30 gpu || { say "no GPU: the steps below need one (harness, models, ranks, launch, speed, sanitize)"; finish 3; }
step harness 60 harness
step models 90 models
step ranks 90 ranks
step launch 60 launch
step speed 260 speed
step profile 120 profile
step sanitize 120 sanitize
[ "$FAILS" -eq 0 ] && finish 0
finish 1
