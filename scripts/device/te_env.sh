# Sourced by the device scripts that run inside TE (after ../shared/tools/te-device's install):
#   . scripts/device/te_env.sh; te_env "$W"
# Puts TE's site on the path, installs megatron-core (.te/mc, carried) once and the carried wheel
# (devcarry/), sets FP8SEL to the carried binary, copies the working tree's pure-Python package over the wheel's (the native core
# stays the wheel's), and records the GPU and the versions in $1/gpu.txt.
te_env() {
  export PYTHONPATH=/root/te/site:${PYTHONPATH:-} PYTHONUNBUFFERED=1 NVTE_FLASH_ATTN=1
  [ -d /root/te/site/megatron ] || python3 -m pip install -q --no-index --no-deps --target /root/te/site .te/mc/*.whl
  python3 -m pip install -q --no-index --no-deps --upgrade --target /root/te/site devcarry/adaptive_fp8-*.whl \
    || python3 -m zipfile -e devcarry/adaptive_fp8-*.whl /root/te/site
  cp -r crates/py/python/adaptive_fp8/. /root/te/site/adaptive_fp8/
  FP8SEL=$PWD/devcarry/fp8sel
  [ -e "$FP8SEL" ] && chmod +x "$FP8SEL"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$1/gpu.txt"
  python3 -c "import megatron.core as m, transformer_engine as t; print('megatron-core', m.__version__, 'TE', t.__version__)" \
    | tee -a "$1/gpu.txt"
}
