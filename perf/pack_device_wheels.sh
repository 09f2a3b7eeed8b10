#!/usr/bin/env bash
# Packs, into .whl/, the Python packages a bare GPU node without network needs for
# perf/gpu_check.sh and perf/tune_gpu_check.sh (the node has torch + CUDA, click, numpy,
# pynvml, pytest; not FlashInfer, sqlite-utils or optuna).
#
#     bash perf/pack_device_wheels.sh            # then copy the repo with .whl/ to the node
#
# FlashInfer 0.7.2.post1's wheel is a 62 MB zip (it carries its CUDA kernel sources for the
# JIT). Unpacked and re-packed as an xz tarball it is ~19 MB, which keeps the repository plus
# .whl/ well under a 64 MiB transfer limit; perf/gpu_check.sh unpacks it into /tmp/site.
# The other packages stay wheels (pip installs them there with --no-index --no-deps).
set -euo pipefail
cd "$(dirname "$0")/.."
PYVER="${PYVER:-3.12}"
DEST=.whl
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$DEST"
download() {
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform any -d "$@"
}
download "$TMP/wheels" flashinfer-python==0.7.2.post1 apache-tvm-ffi==0.1.11
mkdir -p "$TMP/site"
for w in "$TMP"/wheels/*.whl; do python3 -m zipfile -e "$w" "$TMP/site"; done
tar -C "$TMP/site" -cf - . | xz -T0 -6 > "$DEST/flashinfer-site.tar.xz"
download "$DEST" sqlite-utils sqlite-fts4 click-default-group platformdirs \
    optuna sqlalchemy alembic mako colorlog
du -sh "$DEST"
git ls-files -z | xargs -0 du -cb | tail -n 1 | awk '{printf "tracked files: %.1f MiB\n", $1 / 1048576}'
