#!/usr/bin/env bash
# Run a command and say how long it took when it ends, passed or failed (make's phases).
#
#   scripts/timed.sh NAME COMMAND [ARG...]
#
# Prints "+ COMMAND" first and "[time] NAME: 83 s" (", failed: exit N" when it failed) last,
# then exits with the command's status.
set -uo pipefail
name="${1:?usage: $0 NAME COMMAND [ARG...]}"
shift
echo "+ $*" >&2
t0=$SECONDS
"$@"
rc=$?
secs=$((SECONDS - t0))
msg="$name: $secs s"
[[ $secs -ge 60 ]] && msg="$name: $secs s ($((secs / 60)) min $((secs % 60)) s)"
[[ $rc -eq 0 ]] || msg="$msg, failed: exit $rc"
echo "[time] $msg" >&2
exit $rc
