#!/bin/sh
# Stands in for `python -m torch.distributed.run ... -m adaptive_fp8.bench.te_tp` in the CLI tests:
# records its arguments in $FAKE_ARGV and writes $FAKE_REPORT (a te_tp report with made-up
# times) where --report points; exits $FAKE_EXIT (default 0).
echo "$@" > "$FAKE_ARGV"
while [ $# -gt 0 ]; do
  if [ "$1" = "--report" ]; then cp "$FAKE_REPORT" "$2"; fi
  shift
done
exit "${FAKE_EXIT:-0}"
