#!/usr/bin/env bash
# Reads every LLM and VLM config of a LoongForge checkout's configs/models/ with fp8sel explain,
# from the checkout's root and with no flags, as its users keep them (issue 24). Skips what is not
# a language or vision-language model: checkpoint-conversion maps, embodied/world models, LoRA
# adapters and the image projectors.
#   bash scripts/checks/loongforge_configs.sh /path/to/LoongForge [fp8sel]
set -uo pipefail
lf=${1:?a LoongForge checkout}
bin=$(realpath "${2:-target/release/fp8sel}")
cd "$lf" || exit 2
ok=0; refused=0; failed=0
for f in $(find configs/models -name '*.yaml' | grep -v -e ckpt_convert -e /embodied/ -e /lora/ -e /image_projector/ | sort); do
  if "$bin" explain --model "$f" --seq-length 4096 > /dev/null 2> /tmp/lf_err.txt; then
    ok=$((ok + 1))
    comps=$("$bin" explain --model "$f" --seq-length 4096 --json 2> /dev/null | python3 -c 'import json,sys; print(",".join(sorted({m["component"] for m in json.load(sys.stdin)["modules"]})))')
    echo "read     $f ($comps)"
  elif grep -q "is not supported" /tmp/lf_err.txt && grep -q "attention variant" /tmp/lf_err.txt; then
    refused=$((refused + 1)); echo "refused  $f: $(grep -o 'attention variant [a-z0-9_]* is not supported' /tmp/lf_err.txt)"
  else
    failed=$((failed + 1)); echo "FAILED   $f: $(head -c 300 /tmp/lf_err.txt)"
  fi
done
echo "$ok read, $refused refused by name, $failed failed"
[ "$failed" -eq 0 ]
