#!/usr/bin/env bash
# The plugin author's lane: trainspec as a user gets it, outside the repository.
#
#   1. build the sdist and the wheel (python -m build: the wheel is built from the sdist, so a
#      file missing from the sdist fails here);
#   2. check them: twine check; the wheel holds py.typed, the report's JSON schema, every
#      package setup.py maps, the console script and the entry points;
#   3. a fresh virtual environment with only torch (pip install torch==$TORCH), then the
#      README's "Quick start for plugin authors" run verbatim in an empty directory (install
#      the wheel, write the class, trainspec verify, trainspec typecheck, the pytest suite);
#   4. trainspec verify (the built-in matrix) there;
#   5. the example plugin, copied out of the repository, through the run steps of its ci.yml
#      as written (TRAINSPEC names the wheel, as the file says to until trainspec is on an
#      index).
#
# Nothing runs from the repository: every command after the build runs in a temporary
# directory, and the lane checks that `import trainspec` comes from the fresh environment.
# Usage: bash scripts/wheel_lane.sh    (PYTHON, TRAINSPEC_TORCH_VERSION, KEEP=1 to keep the
# temporary directory). Prints the time of each step.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
PY=${PYTHON:-python3}
TOOLS=${TOOLS_PYTHON:-$REPO/.venv/bin/python}  # has build, twine and PyYAML (the dev extra)
TORCH=${TRAINSPEC_TORCH_VERSION:-2.13.0}
WORK=$(mktemp -d -t trainspec-wheel-lane-XXXXXX)
if [[ "${KEEP:-0}" != 1 ]]; then trap 'rm -rf "$WORK"' EXIT; else echo "keeping $WORK"; fi
lane_start=$SECONDS
step_start=$SECONDS
step() {
  echo "::: wheel lane: $* (previous step $((SECONDS - step_start)) s)"
  step_start=$SECONDS
}

step "build the sdist and the wheel"
"$TOOLS" -m build --outdir "$WORK/dist" "$REPO" >"$WORK/build.log" 2>&1 || {
  tail -40 "$WORK/build.log"
  exit 1
}
WHEEL=$(ls "$WORK"/dist/trainspec-*.whl)
SDIST=$(ls "$WORK"/dist/trainspec-*.tar.gz)
echo "built $(basename "$SDIST") and $(basename "$WHEEL")"

step "check them"
"$TOOLS" -m twine check --strict "$WORK"/dist/*
"$TOOLS" "$REPO/scripts/check_distributions.py" "$WHEEL" "$SDIST"

step "a fresh virtual environment with only torch==$TORCH"
AUTHOR=$WORK/author
mkdir -p "$AUTHOR/dist" "$WORK/bin"
cp "$WHEEL" "$AUTHOR/dist/"
"$PY" -m venv "$AUTHOR/.venv"
"$AUTHOR/.venv/bin/python" -m pip install -q --upgrade pip
"$AUTHOR/.venv/bin/python" -m pip install -q "torch==$TORCH"
ln -sf "$(command -v "$PY")" "$WORK/bin/python"  # the README says `python`
export PATH="$WORK/bin:$PATH"
unset PYTHONPATH VIRTUAL_ENV

step "the README's quick start for plugin authors, verbatim, in $AUTHOR"
"$TOOLS" "$REPO/scripts/readme_blocks.py" "$REPO/README.md" "$AUTHOR"
(
  # One shell for all blocks, as a reader types them (the install block activates .venv).
  set -euo pipefail
  cd "$AUTHOR"
  for block in install check test; do
    echo "--- README block: $block"
    cat "$AUTHOR/$block.sh"
    # shellcheck disable=SC1090
    source "$AUTHOR/$block.sh"
  done
)
VENV_BIN=$AUTHOR/.venv/bin
"$VENV_BIN/python" - "$REPO" <<'EOF'
import sys, trainspec, trainspec.conformance, trainspec.reference
repo = sys.argv[1]
for module in (trainspec, trainspec.conformance, trainspec.reference):
    assert not module.__file__.startswith(repo), f"{module.__name__} came from the repository"
    assert "site-packages" in module.__file__, module.__file__
print("trainspec imported from", trainspec.__file__)
EOF

step "trainspec verify (the built-in matrix) in the fresh environment"
(cd "$AUTHOR" && "$VENV_BIN/trainspec" verify --json "$WORK/matrix.json")

step "the example plugin's ci.yml, as written, against the wheel"
EXAMPLE=$WORK/trainspec-example
cp -r "$REPO/examples/trainspec_example" "$EXAMPLE"
rm -rf "$EXAMPLE"/build "$EXAMPLE"/src/*.egg-info
"$TOOLS" "$REPO/scripts/readme_blocks.py" --ci "$EXAMPLE/ci.yml" "$WORK/example-ci.sh"
(
  cd "$EXAMPLE"
  export PATH="$VENV_BIN:$PATH" TRAINSPEC="$WHEEL"
  bash -euo pipefail "$WORK/example-ci.sh"
)

step "done"
echo "::: wheel lane passed in $((SECONDS - lane_start)) s"
