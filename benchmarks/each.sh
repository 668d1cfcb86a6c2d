#!/usr/bin/env bash
# Runs each argument as a command line (bash -c), in order, every one even past a failing one, so
# that an A/B step of gpu_checks.sh keeps the timings of the variants that ran when one fails on a
# card; exits with the first failing status (0 when none failed), each failure named on stderr.
#
#   bash benchmarks/each.sh "python a.py --x" "python a.py --no-x"
status=0
for command in "$@"; do
  bash -c "$command"
  rc=$?
  if ((rc != 0)); then
    echo "each.sh: status $rc from: $command" >&2
    ((status == 0)) && status=$rc
  fi
done
exit "$status"
