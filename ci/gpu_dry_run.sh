#!/bin/sh
# ci/gpu_dry_run.sh: prove here, without a GPU, that the GPU kit works on a machine that lacks the development
# packages (make test runs it). It builds the kit (ci/gpu_kit.sh) into build/gpu-dry, then runs ci/gpu_check.sh
# in a mount namespace (unshare -m) where /usr/include, OpenBLAS, cJSON, cmocka, libgfortran and libquadmath,
# make, cc and nvcc are hidden and the loader's cache is rebuilt without them, as on the device image. Oracle:
# the steps that need no GPU pass (the kit unpacks, its libraries register with ldconfig and every binary
# resolves every library from the kit or CUDA's folders), the first GPU step stops with "no GPU", exit 3.
# Also: every entry of the device table (fsc/plugin/device_ops.h) is exercised by the kernel harness.
# Without unshare (a sandbox without the privilege) it falls back to a loader check: with only the kit's
# folder on LD_LIBRARY_PATH, the kit's libraries resolve there.
set -eu
cd "$(dirname "$0")/.."
KIT=build/gpu-dry

# every device-table entry appears in the harness, by its table name or its public wrapper (fsc_device_NAME)
missing=""
for op in $(sed -n 's/.*(\*\([a-z_0-9]*\))(void \*ctx.*/\1/p' lib/include/fsc/plugin/device_ops.h); do
    grep -Eq "\b($op|fsc_device_$op)\b" tests/test_cuda_backend.c || missing="$missing $op"
done
if [ -n "$missing" ]; then
    echo "gpu_dry_run: device-table entries the kernel harness (tests/test_cuda_backend.c) never calls:$missing" >&2
    exit 1
fi

if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
    echo "gpu_dry_run: skipped: no nvcc here, so no kit can be built"
    exit 0
fi
mkdir -p build
if ! sh ci/gpu_kit.sh "$KIT" > build/gpu-kit.log 2>&1; then
    cat build/gpu-kit.log >&2
    echo "gpu_dry_run: FAILED: ci/gpu_kit.sh could not build the kit (above)" >&2
    exit 1
fi
tail -1 build/gpu-kit.log
# one GPU never needs NCCL: the plug-in loads it with dlopen when a communicator is opened
if readelf -d build/gpu/libfsc_cuda.so | grep NEEDED | grep -q nccl; then
    echo "gpu_dry_run: libfsc_cuda.so links NCCL; it must load it only for a communicator" >&2
    exit 1
fi

T=$(mktemp -d /tmp/fsc-dry.XXXXXX)
trap 'rm -rf "$T"' EXIT
if ! unshare -m true 2>/dev/null; then
    echo "gpu_dry_run: no mount namespace here (unshare -m refused): loader check only"
    mkdir -p "$T/kit"
    tar -C "$T/kit" -xzf "$KIT/kit.tar.gz"
    for b in "$T"/kit/bin/*; do
        out=$(LD_LIBRARY_PATH=$T/kit/lib ldd "$b")
        if echo "$out" | grep -q "not found"; then echo "$out" >&2; exit 1; fi
        for so in $(ls "$T/kit/lib"); do
            line=$(echo "$out" | grep "^[[:space:]]*$so ") || continue
            echo "$line" | grep -q "$T/kit/lib/$so" || { echo "$b: $line: not the kit's" >&2; exit 1; }
        done
    done
    echo "gpu_dry_run: ok (loader check)"
    exit 0
fi

cat > "$T/inside.sh" <<'EOF'
set -eu
T=$1
mount --make-rprivate /
# a private /etc, so that ldconfig writes its cache and gpu_check its conf file in a copy
cp -a /etc "$T/etc"
mount --bind "$T/etc" /etc
# the system's library folder without the development packages' libraries
lib=/usr/lib/x86_64-linux-gnu
mkdir -p "$T/origlib" "$T/newlib"
mount --bind $lib "$T/origlib"
for f in "$T"/origlib/* "$T"/origlib/.[!.]*; do
    [ -e "$f" ] || [ -L "$f" ] || continue
    case $(basename "$f") in
    libopenblas*|openblas*|libblas*|liblapack*|libcjson*|libcmocka*|libcmockery*|libgfortran*|libquadmath*) ;;
    *) ln -s "$f" "$T/newlib/$(basename "$f")" ;;
    esac
done
mount --bind "$T/newlib" $lib
mount -t tmpfs tmpfs /usr/include
: > "$T/empty"
for b in /usr/bin/make /usr/bin/cc /usr/bin/gcc /usr/local/cuda/bin/nvcc; do
    [ -e "$b" ] && mount --bind "$T/empty" "$(readlink -f "$b")"
done
ldconfig
if ldconfig -p | grep -E "lib(openblas|cjson|cmocka)\.so" >&2; then echo "dry run: the libraries are not hidden" >&2; exit 90; fi
rc=0
FSC_KIT=$PWD/build/gpu-dry FSC_GPU_BUDGET=60 OUT=$T/out bash ci/gpu_check.sh || rc=$?
exit $rc
EOF
rc=0
unshare -m sh "$T/inside.sh" "$T" > "$T/log" 2>&1 || rc=$?
cat "$T/log"
s=$T/out/summary.txt
fail() { echo "gpu_dry_run: FAILED: $*" >&2; exit 1; }
[ "$rc" -eq 3 ] || fail "gpu_check exited $rc, expected 3 (no GPU after the steps that need none)"
grep -q '^setup ok' "$s" || fail "the setup step did not pass"
grep -q '^versions ok' "$s" || fail "the versions step did not pass"
grep -q '^gpu FAILED.*no GPU' "$s" || fail "the gpu step did not stop with 'no GPU'"
grep -q '^harness' "$s" && fail "a GPU step ran without a GPU"
[ -s "$T/out/logs.tar.gz" ] || fail "no logs.tar.gz"
echo "gpu_dry_run: ok: the kit's steps that need no GPU pass on a machine without the development packages"
