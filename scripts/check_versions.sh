#!/usr/bin/env bash
# The supported version range, checked: builds a fresh virtual environment per end of the range and runs the whole
# test suite (README.md's pytest command) in each.
#
#   bash scripts/check_versions.sh [oldest|newest|both] [--keep] [--log DIR]
#
# oldest: the lower bounds pyproject.toml declares (torch 2.11.0, which brings Triton 3.6.0 as on the GPU machine;
#         timm 1.0.31 (1.0.20-1.0.30 fail: ConvNeXt without device/dtype or in_chans, save_for_hf configs); the
#         torchvision pip pairs with that torch).
# newest: what a fresh `pip install '.[test]'` resolves (on the CI machine: torch 2.14.1 and Triton 3.8.0).
# Each environment lives in a temporary folder removed at exit (--keep keeps it and prints where); the native CPU
# kernels build cold in it. Output goes to DIR/check_versions_<env>.txt (default results/) and a summary line per
# environment is printed at the end. Exit status 1 if any environment fails. pytest runs as README.md's command does
# (-n auto --dist loadgroup).
set -uo pipefail
which=both
keep=0
log=results
while [ $# -gt 0 ]; do
  case $1 in
    oldest|newest|both) which=$1 ;;
    --keep) keep=1 ;;
    --log) log=$2; shift ;;
    *) echo "check_versions: unknown argument $1 (expected oldest|newest|both, --keep, --log DIR)" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$log" && log=$(cd "$log" && pwd)  # relative to where it was called from
cd "$(dirname "$0")/.."
# the lower bounds, read from pyproject.toml so that the script and the declaration cannot drift
oldest_pins=$(python3 - <<'EOF'
import re
deps = re.findall(r'^\s*"((?:torch|timm)>=[\d.]+)"', open('pyproject.toml').read(), flags=re.M)
pins = [d.replace('>=', '==') for d in deps]
print(' '.join(pins))
EOF
)
case "$oldest_pins" in *torch==*timm==*|*timm==*torch==*) ;; *)
  echo "check_versions: no torch and timm lower bounds found in pyproject.toml (got '$oldest_pins')" >&2; exit 2 ;;
esac
work=$(mktemp -d)
[ "$keep" = 1 ] || trap 'rm -rf "$work"' EXIT
status=0
summary=()
for env in oldest newest; do
  [ "$which" = both ] || [ "$which" = "$env" ] || continue
  out="$log/check_versions_$env.txt"
  venv="$work/$env"
  python3 -m venv "$venv"
  pins=""
  [ "$env" = oldest ] && pins="$oldest_pins"
  {
    echo "# check_versions $env: $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD), pins: ${pins:-none}"
    "$venv/bin/python" -m pip install -q --upgrade pip
    # shellcheck disable=SC2086
    "$venv/bin/python" -m pip install -q $pins '.[test]' > "$work/pip-$env.txt" 2>&1 || {
      grep -v '^WARNING: Location' "$work/pip-$env.txt" | tail -20; echo "check_versions: pip install failed"; }
    "$venv/bin/python" scripts/versions.py
  } 2>&1 | tee "$out"
  start=$(date +%s)
  # as .ci/run does: the installed environment, pytest from the checkout's root
  MRCONVNEXT_EXT_DIR="$work/ext-$env" "$venv/bin/python" -m pytest -q -p no:cacheprovider -n auto --dist loadgroup \
    2>&1 | tee -a "$out"
  rc=${PIPESTATUS[0]}
  versions=$(grep -m1 '^gpu ' "$out")
  result=$(grep -E '^=*.*(passed|failed|error).* in ' "$out" | tail -1 | tr -d '=')
  summary+=("$env ($versions): ${result:-no pytest summary} [$(( $(date +%s) - start )) s wall, rc $rc]")
  [ "$rc" = 0 ] || status=1
  [ "$keep" = 1 ] && echo "kept: $venv"
done
printf '%s\n' "${summary[@]}" | tee "$log/check_versions_summary.txt"
exit $status
