#!/usr/bin/env bash
# The GPU campaign's `wheels` step, run on a machine with access to PyPI (not on the GPU machine,
# which has none): downloads into .wheels/ (ignored by git, carried to the GPU machine) the
# wheels of what the GPU image lacks, for its Python 3.12 on manylinux x86_64, at the versions
# of constraints.txt. The image brings its own jax/jaxlib (0.11.x with the CUDA plugin), flax,
# optax, chex, orbax-checkpoint, numpy, scipy, pandas, pyarrow, matplotlib, tqdm and friends.
#
#     bash benchmarks/campaign/gpu_wheels.sh            # then: du -sh .wheels (must stay well under 64 MiB)
set -euo pipefail
cd "$(dirname "$0")/../.."
DEST=${WHEELS_DIR:-.wheels}
PY=${PYTHON:-python3}
# brax, MuJoCo and MJX, and the pure-Python packages they (and vaco_jax) need that the image lacks.
PACKAGES=(brax mujoco mujoco-mjx jaxopt ml_collections tensorboardX trimesh glfw PyOpenGL
          Flask flask-cors itsdangerous blinker gymnax gymnasium Farama-Notifications filelock)
pinned() {  # NAME==VERSION from constraints.txt (case-insensitive, - and _ alike)
  local key; key=$(echo "$1" | tr 'A-Z_' 'a-z-')
  local line; line=$(grep -v '^#' constraints.txt | awk -F'==' -v k="$key" \
      '{n=tolower($1); gsub("_","-",n); if (n==k) print $0}')
  [ -n "$line" ] || { echo "no pin for $1 in constraints.txt" >&2; exit 1; }
  echo "$line"
}
mkdir -p "$DEST"
SPECS=()
for p in "${PACKAGES[@]}"; do SPECS+=("$(pinned "$p")"); done
"$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
  --platform any -d "$DEST" "${SPECS[@]}"
ls -1 "$DEST"
du -sh "$DEST"
