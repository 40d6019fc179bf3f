#!/bin/sh
# ci/gpu_kit.sh [KIT]: everything ci/gpu_check.sh needs on a lent GPU machine, built here (that machine has no
# package registry, no OpenBLAS, cJSON or cmocka, and maybe no make). KIT (default .gpu, ignored by git) gets
#   kit.tar.gz   bin/ (fsc-train, fsc-sample, fsc-ckpt, test_cuda_backend), lib/ (libfsc_cuda.so and every
#                shared library those need that is neither glibc's, the C++ runtime's nor CUDA's), data/
#                (the default corpus and random tokens below 32000 for the speed runs), bench/torch_gpu.py
#   MANIFEST     what was built, from which commit, with which compilers
# Release flags (-O3, no -march=native: the GPU machine's processor is not this one). Prints the kit's size and
# fails above 40 MiB (a device call carries at most 64 MiB with the working tree).
# Usage: ci/gpu_kit.sh && device run 'bash ci/gpu_check.sh' with carry [".gpu"] (backends/cuda/README.md).
set -eu
cd "$(dirname "$0")/.."
KIT=${1:-.gpu}
B=build/gpu
J=${JOBS:-2}
command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ] || {
    echo "gpu_kit: nvcc not found: the kit needs the CUDA plug-in (install the CUDA toolkit)" >&2
    exit 2
}
make -s -j"$J" BUILD=$B OPT=-O3 lib $B/fsc-train $B/sample $B/ckpt_tool $B/tests/test_cuda_backend cuda

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/data" "$stage/bench"
cp $B/fsc-train "$stage/bin/fsc-train"
cp $B/sample "$stage/bin/fsc-sample"
cp $B/ckpt_tool "$stage/bin/fsc-ckpt"
cp $B/tests/test_cuda_backend "$stage/bin/"
cp $B/libfsc_cuda.so "$stage/lib/"
cp examples/data/coriolanus.txt "$stage/data/"
cp bench/torch_gpu.py "$stage/bench/"

# The shared libraries the binaries need, but for those every Linux with CUDA has (glibc, the C++ runtime) and
# CUDA's own (found there in /usr/local/cuda or the pip wheels). Copied as their sonames, links followed.
for f in "$stage"/bin/* "$stage/lib/libfsc_cuda.so"; do
    ldd "$f" | awk '/=> \// {print $1, $3}'
done | sort -u | while read -r soname path; do
    case $soname in
    libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|ld-linux*|libresolv.so.*|libstdc++.so.*|libgcc_s.so.*) ;;
    libcuda.so.*|libcudart.so.*|libcublas*|libnccl.so.*|libnvidia*) ;;
    *) cp -L "$path" "$stage/lib/$soname" ;;
    esac
done

# Random tokens (uint16, below 32000: valid for GPT-2's 50257 and Llama's 32000 vocabularies), 2^20 of them
python3 -c '
import random, struct, sys
r = random.Random(1)
sys.stdout.buffer.write(struct.pack("<%dH" % (1 << 20), *(r.randrange(32000) for _ in range(1 << 20))))
' > "$stage/data/random32k.u16"

mkdir -p "$KIT"
tar -C "$stage" -czf "$KIT/kit.tar.gz.tmp" .
mv "$KIT/kit.tar.gz.tmp" "$KIT/kit.tar.gz"
{
    echo "fsc GPU kit, built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m)"
    echo "commit: $(git describe --always --dirty 2>/dev/null || echo unknown)"
    echo "cc: $(${CC:-cc} --version | head -1)"
    echo "nvcc: $( (command -v nvcc >/dev/null && nvcc --version || /usr/local/cuda/bin/nvcc --version) | tail -1)"
    echo "files:"
    (cd "$stage" && find . -type f | sort | while read -r f; do printf '  %s %s\n' "$(wc -c <"$f")" "$f"; done)
} > "$KIT/MANIFEST"
kib=$(du -k "$KIT/kit.tar.gz" | cut -f1)
echo "gpu_kit: $KIT/kit.tar.gz: $((kib / 1024)) MiB ($kib KiB), $(grep -c '^  ' "$KIT/MANIFEST") files (MANIFEST lists them)"
if [ "$kib" -gt $((40 * 1024)) ]; then
    echo "gpu_kit: the kit is over 40 MiB" >&2
    exit 1
fi
