//! Launchers of the cast kernels, shared by the per-point measurement and the microbenchmarks.

use cudarc::driver::{LaunchConfig, PushKernelArg};

use super::{CastKernel, Gpu};
use crate::error::BenchError;

/// Launches `quant_1x128` over `n_tiles` tiles described by the table at `tiles`: rowwise
/// and/or columnwise 1x128 casts of the bf16 matrix at `src` (`cols` columns).
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
    quant_1x128_with(
        gpu,
        &gpu.k.quant_1x128,
        src,
        cols,
        tiles,
        n_tiles,
        row,
        col,
        pow2,
        out,
    )
}

/// [`quant_1x128`] with a given kernel of the same signature.
#[allow(clippy::too_many_arguments)]
pub(crate) fn quant_1x128_with(
    gpu: &Gpu,
    kernel: &CastKernel,
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
    let (r, c, p2) = (i32::from(row), i32::from(col), i32::from(pow2));
    let mut b = gpu.stream.launch_builder(&kernel.func);
    let n_tiles_u64 = u64::from(n_tiles);
    if kernel.name.starts_with("quant_1x128_lean") && !cols.is_multiple_of(8) {
        return Err(BenchError::Unsupported(format!(
            "{}: {cols} columns are not a multiple of 8",
            kernel.name
        )));
    }
    let cfg = match kernel.pipe {
        None => LaunchConfig {
            grid_dim: (n_tiles, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        },
        Some((smem, per_sm)) => {
            if !cols.is_multiple_of(8) {
                return Err(BenchError::Unsupported(format!(
                    "{}: {cols} columns are not a multiple of 8",
                    kernel.name
                )));
            }
            LaunchConfig {
                grid_dim: (n_tiles.min(per_sm * gpu.info.sm_count), 1, 1),
                block_dim: (256, 1, 1),
                shared_mem_bytes: smem,
            }
        }
    };
    b.arg(&src).arg(&cols).arg(&tiles);
    if kernel.pipe.is_some() {
        b.arg(&n_tiles_u64);
    }
    b.arg(&r)
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
