"""The numerics probe's FP8 round trip (adaptive_fp8.bench.quant_error) against Transformer Engine's
own quantizers on the H200: the same random BF16 tensors (with blocks of tiny and of large values
mixed in) through both, the share of elements whose dequantized values differ and both relative
RMS errors. A quantizer TE does not offer under the expected name is reported, not fatal."""

import torch

from adaptive_fp8.bench.quant_error import error_sums, recipe_rules, round_trip


def tensors():
    g = torch.Generator(device="cuda").manual_seed(5)
    x = torch.randn(1024, 4096, device="cuda", generator=g)
    x[:, 128:256] *= 1e-4
    x[::7, 1024:1152] *= 300
    return {"random": torch.randn(2048, 2048, device="cuda", generator=g), "mixed": x}


def te_quantizers():
    import transformer_engine.pytorch  # noqa: F401  (loads the extension transformer_engine_torch)
    import transformer_engine_torch as tex

    out = {}
    try:
        from transformer_engine.pytorch.tensor.float8_blockwise_tensor import Float8BlockQuantizer

        out["blockwise input (1x128)"] = ("blockwise", "input", Float8BlockQuantizer(
            fp8_dtype=tex.DType.kFloat8E4M3, rowwise=True, columnwise=False, amax_epsilon=0.0, force_pow_2_scales=True, block_scaling_dim=1))
        out["blockwise weight (128x128)"] = ("blockwise", "weight", Float8BlockQuantizer(
            fp8_dtype=tex.DType.kFloat8E4M3, rowwise=True, columnwise=False, amax_epsilon=0.0, force_pow_2_scales=True, block_scaling_dim=2))
    except Exception as e:
        print(f"blockwise: TE quantizer unavailable: {type(e).__name__}: {e}")
    try:
        from transformer_engine.pytorch.tensor.float8_tensor import Float8CurrentScalingQuantizer

        out["tensorwise input"] = ("tensorwise", "input", Float8CurrentScalingQuantizer(fp8_dtype=tex.DType.kFloat8E4M3, device=torch.device("cuda")))
    except Exception as e:
        print(f"tensorwise: TE quantizer unavailable: {type(e).__name__}: {e}")
    try:
        from transformer_engine.pytorch.tensor.mxfp8_tensor import MXFP8Quantizer

        out["mxfp8 input (1x32)"] = ("mxfp8", "input", MXFP8Quantizer(fp8_dtype=tex.DType.kFloat8E4M3))
    except Exception as e:
        print(f"mxfp8: TE quantizer unavailable: {type(e).__name__}: {e}")
    return out


def main():
    print("| quantizer | tensor | elements differing | max abs diff | rel. RMS (ours) | rel. RMS (TE) |")
    print("|---|---|---:|---:|---:|---:|")
    for label, (recipe, op, q) in te_quantizers().items():
        rule = recipe_rules(recipe)[op]
        for name, x in tensors().items():
            xb = x.bfloat16()
            try:
                te_dq = q(xb).dequantize(dtype=torch.float32)
            except Exception as e:
                print(f"| {label} | {name} | TE failed: {type(e).__name__}: {str(e)[:80]} | | | |")
                continue
            ours, _ = round_trip(xb, rule)
            ref = xb.float()
            te_rel = float(((te_dq - ref) ** 2).sum() / (ref**2).sum()) ** 0.5
            diff = (ours != te_dq)
            print(f"| {label} | {name} | {float(diff.float().mean()):.2e} | {float((ours - te_dq).abs().max()):.3g} | "
                  f"{error_sums(xb, rule).summary()['rel_rms']:.5f} | {te_rel:.5f} |")


if __name__ == "__main__":
    main()
