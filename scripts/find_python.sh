#!/usr/bin/env bash
# Print the path of a Python interpreter of the given minor version (e.g. 3.13).
#
#   scripts/find_python.sh 3.13
#
# Tries `python3.13` on PATH (it must run and report 3.13: a pyenv shim without that
# version selected does not), then pyenv's installed versions (`pyenv root`/versions/3.13.*,
# the newest). Exits 1 with a message naming what to install when there is none.
set -euo pipefail
want="${1:?usage: $0 MAJOR.MINOR}"
runs() { [[ "$("$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" == "$want" ]]; }
if cand="$(command -v "python$want" 2>/dev/null)" && runs "$cand"; then echo "$cand"; exit 0; fi
if root="$(pyenv root 2>/dev/null)"; then
  for dir in $(ls -d "$root/versions/$want".* 2>/dev/null | sort -V -r); do
    if [[ -x "$dir/bin/python$want" ]] && runs "$dir/bin/python$want"; then
      echo "$dir/bin/python$want"; exit 0
    fi
  done
fi
echo "find_python: no Python $want (install python$want, or \`pyenv install $want\`;" \
  "make test-pythons PYTHONS= skips the other Pythons)" >&2
exit 1
