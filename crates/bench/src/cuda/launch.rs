//! Launchers of the cast kernels, shared by the per-point measurement and the microbenchmarks.

use cudarc::driver::{LaunchConfig, PushKernelArg};

use super::Gpu;
use crate::error::BenchError;

/// Launches the 1x128 cast over `n_tiles` tiles described by the table at `tiles`: rowwise
/// and/or columnwise 1x128 casts of the bf16 matrix at `src` (`cols` columns, a multiple of 8).
/// `out` = [rowwise data, rowwise scales, columnwise data, columnwise scales].
#[allow(clippy::too_many_arguments)]
pub(crate) fn quant_1x128(
    gpu: &Gpu,
    src: u64,
    cols: u64,
    tiles: u64,
    n_tiles: u32,
    row: bool,
    col: bool,
    pow2: bool,
    out: [u64; 4],
) -> Result<(), BenchError> {
    if n_tiles == 0 {
        return Ok(());
    }
    if !cols.is_multiple_of(8) {
        return Err(BenchError::Unsupported(format!(
            "the 1x128 cast needs 16-byte aligned rows; {cols} columns are not a multiple of 8"
        )));
    }
    let cfg = LaunchConfig {
        grid_dim: (n_tiles, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let (r, c, p2) = (i32::from(row), i32::from(col), i32::from(pow2));
    let kernel = if col {
        &gpu.k.quant_1x128
    } else {
        &gpu.k.quant_1x128_rowwise
    };
    let mut b = gpu.stream.launch_builder(kernel);
    b.arg(&src)
        .arg(&cols)
        .arg(&tiles)
        .arg(&r)
        .arg(&c)
        .arg(&p2)
        .arg(&out[0])
        .arg(&out[1])
        .arg(&out[2])
        .arg(&out[3]);
    // SAFETY: the tile table was built from the same segments the buffers were sized from.
    unsafe { b.launch(cfg) }.map_err(BenchError::driver)?;
    Ok(())
}

/// Launches `quant_128x128` on one `[n, k]` bf16 weight at `w`.
/// `out` = [data, scales, transposed data, transposed scales].
pub(crate) fn quant_128x128(
    gpu: &Gpu,
    w: u64,
    n: u64,
    k: u64,
    pow2: bool,
    out: [u64; 4],
) -> Result<(), BenchError> {
    let cfg = LaunchConfig {
        grid_dim: (k.div_ceil(128) as u32, n.div_ceil(128) as u32, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let p2 = i32::from(pow2);
    let mut b = gpu.stream.launch_builder(&gpu.k.quant_128x128);
    b.arg(&w)
        .arg(&n)
        .arg(&k)
        .arg(&p2)
        .arg(&out[0])
        .arg(&out[1])
        .arg(&out[2])
        .arg(&out[3]);
    // SAFETY: the caller sized the four outputs for an [n, k] weight.
    unsafe { b.launch(cfg) }.map_err(BenchError::driver)?;
    Ok(())
}
