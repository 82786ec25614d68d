#!/usr/bin/env bash
# The GPU benchmarks in one prepared run, for a lent GPU machine with minutes to spare.
#
#   OUT=/some/dir BUDGET_S=480 bash benchmarks/gpu_run.sh
#
# Runs, in order of priority, each as its own process under what is left of BUDGET_S
# seconds (a step that would start with under 40 s left is skipped, and says so; STEPS="a b"
# runs only the steps named):
#   1. f64_small   bench_forward --device gpu --mjx: chain7, humanoid, B = 1024 ... 65536, float64
#   2. f32_small   the same in float32
#   3. rollouts_mjx bench_forward --batched-rollout 0.1 --mjx: B = 8192 rollouts of 100 RK4
#                  steps, chain7 and humanoid, simjax against MJX's scan of mjx.step, float64
#   4. f64_deep    chain50, chain20, float64, simjax alone
#   5. f32_deep    the same in float32
#   6. constrained bench_constrained --device gpu --parts forward (four-bar, welded humanoid)
#   7. rollouts    bench_constrained --device gpu --parts rollout: 1 s RK4 rollouts with
#                  projection, four-bar at B = 1024, welded humanoid at B = 256
#   8. f64_chain20_mjx  chain20 with MJX, B = 1024 and 65536
# Peers' CPU loops are left out (--no-peers: their CPU numbers are in RESULTS.md); MJX runs
# on the same GPU in the same dtype. MJX's deep chains come last and few: its programs
# take long to compile (XLA:CPU, this repo's 2-core machine: chain20 34 s, chain50 223 s,
# against simjax's 1.3 and 1.5 s). States: 4096 distinct random ones, repeated to fill the
# larger batches (--distinct). Everything lands in $OUT: log.txt (the tables) and
# results.json (every step's JSON, merged after each step, so a cut-off run keeps what it did).
#
# SMALL_BATCHES, ROLLOUT_MJX_BATCH, DEEP_BATCHES, CONSTRAINED_BATCHES, ROLLOUT_BATCHES, HUMANOID_ROLLOUT_BATCHES,
# DISTINCT and DEVICE (cpu: try it where there is no GPU, with small batches) override the
# defaults below.
#
# Needs a CUDA build of jax, mujoco and mujoco-mjx; benchmarks/gpu_wheels.sh fetches the
# wheels a lent machine lacks (and says how to install them there). If simjax's XLA:CPU
# flags are unknown to that jaxlib, the run says so and goes on with SIMJAX_XLA_FLAGS=0
# (they only touch the CPU backend).
set -u
out=${OUT:-/tmp/simjax-gpu}
mkdir -p "$out"
budget=${BUDGET_S:-480}
dev=${DEVICE:-gpu} # DEVICE=cpu with small batches tries the script where there is no GPU
t_start=$(date +%s)
py=${PYTHON:-python3}
root=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 SIMJAX_COMPILATION_CACHE=0
log="$out/log.txt"
json_dir=$(mktemp -d)

left() { echo $((budget - ($(date +%s) - t_start))); }

{
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
    grep -m1 "model name" /proc/cpuinfo
    echo "cores: $(nproc)"
    $py -c "import jax, jaxlib, numpy; print('jax', jax.__version__, 'jaxlib', jaxlib.__version__, 'numpy', numpy.__version__)"
} >>"$log" 2>&1

smoke="import simjax, jax; jax.config.update('jax_platforms', 'cuda,cpu' if '$dev' == 'gpu' else 'cpu'); \
print('smoke:', jax.devices(), float(jax.numpy.ones(3).sum()))"
if ! $py -c "$smoke" >>"$log" 2>&1; then
    echo "smoke test failed with simjax's XLA flags; again with SIMJAX_XLA_FLAGS=0" | tee -a "$log"
    export SIMJAX_XLA_FLAGS=0
    $py -c "$smoke" >>"$log" 2>&1 || {
        echo "smoke test failed: see $log" | tee -a "$log"
        tail -30 "$log"
        exit 1
    }
fi

merge() {
    $py - "$json_dir" "$out/results.json" <<'EOF'
import json, sys
from pathlib import Path
src, dst = Path(sys.argv[1]), Path(sys.argv[2])
merged = {}
for f in sorted(src.glob("*.json")):
    try:
        merged[f.stem] = json.loads(f.read_text())
    except ValueError:
        merged[f.stem] = {"error": "unreadable (cut off while writing)"}
dst.write_text(json.dumps(merged, indent=1))
EOF
}

step() { # name, cap seconds, script, args...
    local name=$1 cap=$2
    shift 2
    if [ -n "${STEPS:-}" ] && [[ " $STEPS " != *" $name "* ]]; then return; fi
    local l
    l=$(left)
    [ "$l" -gt "$cap" ] && l=$cap
    if [ "$l" -lt 40 ]; then
        echo "== $name: skipped (budget spent)" | tee -a "$log"
        return
    fi
    echo "== $name: $l s at most, $(date -u +%T)" | tee -a "$log"
    timeout "$l" $py "$@" --json "$json_dir/$name.json" >>"$log" 2>&1
    echo "== $name: rc=$? at $(date -u +%T)" | tee -a "$log"
    merge
}

read -r -a small <<<"${SMALL_BATCHES:-1024 4096 16384 65536}"
read -r -a deep <<<"${DEEP_BATCHES:-1024 8192 65536}"
read -r -a cfd <<<"${CONSTRAINED_BATCHES:-1024 16384}"
fwd=("$root/benchmarks/bench_forward.py" --device "$dev" --no-peers --distinct "${DISTINCT:-4096}" --repeats 5)
step f64_small 150 "${fwd[@]}" --mjx --models chain7 humanoid --batches "${small[@]}"
step f32_small 120 "${fwd[@]}" --mjx --float32 --models chain7 humanoid --batches "${small[@]}"
step rollouts_mjx 150 "${fwd[@]}" --mjx --batched-rollout 0.1 --models chain7 humanoid \
    --batches "${ROLLOUT_MJX_BATCH:-8192}"
step f64_deep 80 "${fwd[@]}" --models chain50 chain20 --batches "${deep[@]}"
step f32_deep 70 "${fwd[@]}" --float32 --models chain50 chain20 --batches "${deep[@]}"
step constrained 70 "$root/benchmarks/bench_constrained.py" --device "$dev" --no-peers --parts forward \
    --fd-batches "${cfd[@]}"
step rollouts 100 "$root/benchmarks/bench_constrained.py" --device "$dev" --no-peers --parts rollout \
    --rollout-batches "${ROLLOUT_BATCHES:-1024}" --humanoid-rollout-batches "${HUMANOID_ROLLOUT_BATCHES:-256}"
step f64_chain20_mjx 120 "${fwd[@]}" --mjx --models chain20 --batches "${deep[0]}" "${deep[-1]}"
rm -rf "$json_dir"
echo "done in $(($(date +%s) - t_start)) s" | tee -a "$log"
grep -E "^\| (chain|humanoid|fourbar)|^== " "$log"
