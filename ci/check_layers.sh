#!/bin/sh
# The library's arrows run one way: every #include "..." in lib/ (sources, private and public headers) names a
# header of its own layer or of a layer below it, the core calls no function the simulator (sim/) defines, and
# only the core and its backends see the device's table (core/device_impl.h). Fails naming the file, the include
# and both layers. docs/design.md draws the same table. Run from the repository root (make test runs it first).
set -e

# The layers, lowest first: a file may include its own layer and the layers listed before it. Each line: the
# layer, then what belongs to it: folders of lib/ and public headers (fsc/NAME for lib/include/fsc/NAME.h,
# fsc/plugin/* for the plug-in ABI headers). A public header missing from the table fails the check.
LAYERS='
core     lib/core fsc/export fsc/status fsc/dtype fsc/tensor fsc/rng fsc/device fsc/comm fsc/trace fsc/settings
         fsc/flight fsc/launch fsc/cluster fsc/model fsc/generate fsc/exact fsc/version fsc/plugin/*
io       lib/io fsc/data fsc/safetensors
text     lib/text fsc/bpe
optim    lib/optim fsc/optim fsc/schedule
nn       lib/nn fsc/nn fsc/checkpoint_wrapper fsc/ops
moe      lib/moe fsc/moe
tp       lib/tp fsc/tp
layers   lib/layers fsc/layers
parallel lib/parallel fsc/parallel fsc/eval fsc/pipe_schedule
model    lib/model fsc/gpt fsc/llama fsc/gpt_engine fsc/family
ckpt     lib/ckpt fsc/ckpt
plan     lib/plan fsc/plan
api      fsc/fsc
'

files=$(ls lib/*/*.c lib/*/*.h lib/include/fsc/*.h lib/include/fsc/plugin/*.h)
for f in $files; do
  echo "$f:#self" # the file itself: in a layer?
  grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" | sed "s|^|$f:|"
done | awk -v layers="$LAYERS" '
  BEGIN {
    n = split(layers, line, "\n"); rank = 0
    for (i = 1; i <= n; i++) {
      k = split(line[i], w, /[ \t]+/); first = 1
      for (j = 1; j <= k; j++) {
        if (w[j] == "") continue
        if (first && line[i] !~ /^[ \t]/) { name = w[j]; rank++; names[rank] = name; first = 0; continue }
        first = 0
        layer_of[w[j]] = rank
      }
    }
  }
  # the layer of a file or of an included name ("lib/core", "fsc/comm", "fsc/plugin/comm_ops")
  function layer(key,   d) {
    if (key in layer_of) return layer_of[key]
    if (key ~ /^fsc\/plugin\// && ("fsc/plugin/*" in layer_of)) return layer_of["fsc/plugin/*"]
    return 0
  }
  # what a file belongs to: its lib/ folder, or fsc/NAME for a public header
  function owner(path) {
    if (path ~ /^lib\/include\//) { sub(/^lib\/include\//, "", path); sub(/\.h$/, "", path); return path }
    sub(/\/[^\/]*$/, "", path); return path
  }
  /:#self$/ {
    file = $0; sub(/:.*/, "", file)
    if (!layer(owner(file))) { printf "%s: in no layer of ci/check_layers.sh (add %s to LAYERS)\n", file, owner(file); bad = 1 }
    next
  }
  {
    file = $0; sub(/:.*/, "", file)
    inc = $0; sub(/^[^"]*"/, "", inc); sub(/".*/, "", inc)
    dir = file; sub(/\/[^\/]*$/, "", dir)
    # resolve: "x.h" beside the file, "../x.h" one folder up, "fsc/x.h" a public header, "core/x.h" lib/core
    if (inc ~ /^\.\.\//) { sub(/^\.\.\//, "", inc); d = dir; sub(/\/[^\/]*$/, "", d); path = d "/" inc }
    else if (inc !~ /\//) path = dir "/" inc
    else if (inc ~ /^fsc\//) path = "lib/include/" inc
    else path = "lib/" inc
    from = owner(file); to = owner(path)
    if (!layer(to)) {
      if (path ~ /^lib\/include\// || to ~ /^lib\/[a-z_]+$/) {
        printf "%s: #include \"%s\": %s is in no layer of ci/check_layers.sh (add it to LAYERS)\n", file, inc, to
        bad = 1
      }
      next
    }
    if (!layer(from)) next # reported once, as the file itself
    if (layer(to) > layer(from)) {
      printf "%s: #include \"%s\": layer %s includes the higher layer %s\n", file, inc, names[layer(from)], names[layer(to)]
      bad = 1
    }
  }
  END { exit bad }
' || { echo "check_layers: includes that run up, or files in no layer (the order: LAYERS above, docs/design.md)"; exit 1; }

# Nothing in the core calls the simulator: no lib/core file names a function that sim/*.c defines.
sim_fns=$(sed -n 's/^[a-z][a-z0-9_ *]*[ *]\([a-z_][a-z0-9_]*\)(.*/\1/p' sim/*.c | sort -u)
bad=0
for fn in $sim_fns; do
  hits=$(grep -nE "(^|[^a-z0-9_])$fn[[:space:]]*\(" lib/core/*.c lib/core/*.h | grep -v '^[^:]*:[0-9]*:[[:space:]]*\(/\*\|\*\)' || true)
  if [ -n "$hits" ]; then
    echo "$hits" | sed "s|\$| (the core names $fn, which sim/ defines: the core calls no simulator)|"
    bad=1
  fi
done
[ $bad = 0 ] || { echo "check_layers: the core calls the simulator"; exit 1; }
# Checkpoints see the engine through its narrow header only (parallel/engine_ckpt.h), never its whole state.
wide=$(grep -ln '#include "parallel/engine_impl.h"' lib/ckpt/*.c lib/ckpt/*.h || true)
if [ -n "$wide" ]; then
  echo "$wide" | sed 's|$|: includes parallel/engine_impl.h (lib/ckpt sees the engine through parallel/engine_ckpt.h only)|'
  echo "check_layers: lib/ckpt reaches into the engine's state"
  exit 1
fi
# The device's table is the core's and its backends': every other file calls kernels through core/kernels.h
# (fsc_k_gemm, ...), which keeps struct fsc_device opaque. core/device_impl.h is included only in lib/core,
# backends/ (which fill the table) and the tests of the core's device and of the backends' kernels named here.
IMPL_TESTS='tests/test_cpu_kernels.c tests/test_cpu_modern.c tests/test_cuda_backend.c tests/test_device.c
            tests/test_launch.c tests/test_sim_stage.c'
impl=$(grep -rl --include='*.c' --include='*.h' --include='*.cu' --include='*.cc' --include='*.cpp' \
         '#[[:space:]]*include[[:space:]]*"[^"]*device_impl\.h"' . --exclude-dir=.git --exclude-dir='build*' |
       sed 's|^\./||' | grep -v '^lib/core/\|^backends/' || true)
bad=0
for f in $impl; do
  case " $(echo $IMPL_TESTS) " in *" $f "*) continue ;; esac
  echo "$f: includes core/device_impl.h (the device's table is the core's: include core/kernels.h and call fsc_k_*)"
  bad=1
done
[ $bad = 0 ] || { echo "check_layers: a file outside the core and its backends reaches into the device's table"; exit 1; }
echo "check_layers: every include runs down the layers ($(echo "$files" | wc -w) files)"
