#!/usr/bin/env bash
# Development convenience after `scripts/setup-env.sh`: make the strict editable tree follow
# new files in reference_impls/ and conformance_tests/ without reinstalling, by replacing
# their per-file link folders with links to the whole folder. Entry points still need a
# reinstall (scripts/setup-env.sh) when pyproject.toml changes.
set -euo pipefail
cd "$(dirname "$0")/.."
tree=$(ls -d build/__editable__.trainspec-*/trainspec)
for pair in reference:reference_impls conformance:conformance_tests; do
  name=${pair%%:*}; src=${pair##*:}
  if [[ ! -L "$tree/$name" ]]; then rm -rf "${tree:?}/$name"; ln -s "$PWD/$src" "$tree/$name"; fi
done
for f in interfaces/*.py interfaces/py.typed; do
  [[ -e "$tree/$(basename "$f")" ]] || ln -s "$PWD/$f" "$tree/$(basename "$f")"
done
