#!/usr/bin/env bash
# The wheels a lent GPU machine lacks for benchmarks/gpu_run.sh (it has jax with CUDA,
# equinox, diffrax, optax, optimistix, lineax, but no MuJoCo), downloaded here into the
# repository's .whl/ (ignored by git) for its Python 3.12 on x86-64 Linux:
#
#   bash benchmarks/gpu_wheels.sh            # here, once
#   # there, with .whl carried along:
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
#   PYTHONPATH=/tmp/site BUDGET_S=480 bash benchmarks/gpu_run.sh
#
# MuJoCo 4.0.0 does not carry MJX: mujoco-mjx comes separately (with trimesh, which it
# imports); mujoco-studio, glfw, pyopengl and websockets are MuJoCo 4's own requirements.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$root/.whl" "$root/.git/info"
grep -qx "/.whl/" "$root/.git/info/exclude" 2>/dev/null || echo "/.whl/" >>"$root/.git/info/exclude"
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
    manylinux1_x86_64; do
    platforms+=(--platform "$p")
done
"${PYTHON:-python3}" -m pip download -q --no-deps --only-binary=:all: --python-version "${PY_VERSION:-3.12}" \
    --implementation cp "${platforms[@]}" -d "$root/.whl" \
    mujoco==4.0.0 mujoco-core==4.0.0 mujoco-studio==4.0.0 mujoco-mjx==3.17.0 trimesh glfw pyopengl websockets
ls -la "$root/.whl"
