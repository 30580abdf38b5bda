"""The device warning on real torch (no TE needed): a policy measured on another GPU warns once
over the hook's decisions, this GPU's own is silent, and what the check costs a module decision
(the hook calls it per TE module at build time). On the GPU machine, carrying devcarry/:

    python3 -m pip install -q --no-index --no-deps --target /tmp/af devcarry/*.whl
    PYTHONPATH=/tmp/af python3 scripts/device/device_warning.py
"""
import json, sys, time, tempfile, warnings, os
from types import SimpleNamespace
import torch
torch.cuda.init(); torch.zeros(1, device="cuda")
from adaptive_fp8 import megatron, Policy
from adaptive_fp8._megatron_config import check_device, this_gpu
gpu = this_gpu(); print("gpu:", gpu)
pol = json.load(open("policies/llama3_2_1b.json"))
def cfg(prov_dev):
    d = dict(pol); d["provenance"] = dict(pol["provenance"], device=[prov_dev])
    f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False); json.dump(d, f); f.close()
    return SimpleNamespace(fp8_dynamic_policy_path=f.name, seq_length=8192, micro_batch_size=1, tensor_model_parallel_size=1, expert_tensor_parallel_size=None, context_parallel_size=1, moe_router_topk=1, fp8_dynamic_num_tokens=None,
                           fp8="e4m3", fp8_recipe="blockwise")
rows = []
for dev in ["NVIDIA H200", "NVIDIA H100 80GB HBM3", gpu]:
    megatron._said.clear()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        c = cfg(dev)
        fp8 = [megatron.selective_fp8_init_decision(c, "TERowParallelLinear", "fc2", {}) for _ in range(3)]
    said = [str(x.message) for x in w if "this GPU" in str(x.message)]
    rows.append((dev, len(said), said[0][:110] if said else "-"))
p = Policy.load("policies/llama3_2_1b.json")
n = 2000
t = time.perf_counter()
for _ in range(n): check_device(p)
us = (time.perf_counter() - t) / n * 1e6
print("| policy measured on | warnings (3 decisions) | first |"); print("|---|---:|---|")
for r in rows: print(f"| {r[0]} | {r[1]} | {r[2]} |")
print(f"check_device: {us:.1f} us a call ({n} calls)")
