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

/// Largest value of each FP8 format: the quantization factor is `fmax / amax`.
pub(crate) const fn fp8_max(e5m2: bool) -> f32 {
    if e5m2 { 57344.0 } else { 448.0 }
}

/// One launch per 128x128 tile of a per-tensor tile table (`Segments::tensor_tiles`).
fn tile_grid(n_tiles: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (n_tiles, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

fn check_cols(cols: u64) -> Result<(), BenchError> {
    if cols.is_multiple_of(8) {
        Ok(())
    } else {
        Err(BenchError::Unsupported(format!(
            "the per-tensor cast needs 16-byte aligned rows; {cols} columns are not a multiple of 8"
        )))
    }
}

/// The amax pass of current scaling: `amax[segment] = max |x|` over each segment of the bf16
/// matrix at `src` (atomic maxima: the caller zeroes `amax` first, as TE does).
pub(crate) fn amax_tiles(
    gpu: &Gpu,
    src: u64,
    cols: u64,
    tiles: u64,
    n_tiles: u32,
    amax: u64,
) -> Result<(), BenchError> {
    if n_tiles == 0 {
        return Ok(());
    }
    check_cols(cols)?;
    let mut b = gpu.stream.launch_builder(&gpu.k.amax_tiles);
    b.arg(&src).arg(&cols).arg(&tiles).arg(&amax);
    // SAFETY: the tile table was built for this matrix; `amax` holds one float per segment.
    unsafe { b.launch(tile_grid(n_tiles)) }.map_err(BenchError::driver)?;
    Ok(())
}

/// The scale kernel of current scaling: for `n` tensors, `scale = fmax / amax` (power of two
/// when `pow2`) and `scale_inv = 1 / scale`.
pub(crate) fn tensor_scale(
    gpu: &Gpu,
    amax: u64,
    n: u64,
    e5m2: bool,
    pow2: bool,
    scale: u64,
    scale_inv: u64,
) -> Result<(), BenchError> {
    let cfg = LaunchConfig {
        grid_dim: (n.div_ceil(128) as u32, 1, 1),
        block_dim: (128, 1, 1),
        shared_mem_bytes: 0,
    };
    let (fmax, p2) = (fp8_max(e5m2), i32::from(pow2));
    let mut b = gpu.stream.launch_builder(&gpu.k.tensor_scale);
    b.arg(&amax)
        .arg(&n)
        .arg(&fmax)
        .arg(&p2)
        .arg(&scale)
        .arg(&scale_inv);
    // SAFETY: the three arrays hold `n` floats each (the caller's per-tensor buffers).
    unsafe { b.launch(cfg) }.map_err(BenchError::driver)?;
    Ok(())
}

/// Where a per-tensor cast reads its scale and writes its outputs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TensorCast {
    /// Quantization factors, one per segment.
    pub scale: u64,
    /// Where `1 / scale` is written, one per segment.
    pub scale_inv: u64,
    /// Delayed scaling: where the amax is recorded (0: not recorded).
    pub amax_rec: u64,
    /// Rowwise data (0: not written).
    pub row: u64,
    /// Columnwise (transposed) data (0: not written).
    pub col: u64,
    /// E5M2 instead of E4M3.
    pub e5m2: bool,
}

/// The per-tensor cast (rowwise and/or transposed) of the bf16 matrix at `src`.
pub(crate) fn cast_tensor(
    gpu: &Gpu,
    src: u64,
    cols: u64,
    tiles: u64,
    n_tiles: u32,
    c: TensorCast,
) -> Result<(), BenchError> {
    if n_tiles == 0 {
        return Ok(());
    }
    check_cols(cols)?;
    let (r, col, e5) = (
        i32::from(c.row != 0),
        i32::from(c.col != 0),
        i32::from(c.e5m2),
    );
    let mut b = gpu.stream.launch_builder(&gpu.k.cast_tensor);
    b.arg(&src)
        .arg(&cols)
        .arg(&tiles)
        .arg(&r)
        .arg(&col)
        .arg(&e5)
        .arg(&c.scale)
        .arg(&c.scale_inv)
        .arg(&c.amax_rec)
        .arg(&c.row)
        .arg(&c.col);
    // SAFETY: the tile table was built from the segments the outputs were sized from; the
    // per-segment arrays hold one float per segment index the table names.
    unsafe { b.launch(tile_grid(n_tiles)) }.map_err(BenchError::driver)?;
    Ok(())
}

/// The delayed recipe's per-step update of `n` tensors: roll the `[len, n]` amax history,
/// recompute `scale` and `scale_inv`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn delayed_update(
    gpu: &Gpu,
    history: u64,
    len: u64,
    n: u64,
    algo_max: bool,
    e5m2: bool,
    pow2: bool,
    scales: [u64; 2],
) -> Result<(), BenchError> {
    if n == 0 {
        return Ok(());
    }
    if len == 0 || len > u64::from(crate::recipe::MAX_AMAX_HISTORY) {
        return Err(BenchError::Unsupported(format!(
            "amax history of {len} steps: the update kernel holds 1 to {}",
            crate::recipe::MAX_AMAX_HISTORY
        )));
    }
    let cfg = LaunchConfig {
        grid_dim: (n as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let (a, fmax, p2) = (i32::from(algo_max), fp8_max(e5m2), i32::from(pow2));
    let mut b = gpu.stream.launch_builder(&gpu.k.delayed_update);
    b.arg(&history)
        .arg(&len)
        .arg(&n)
        .arg(&a)
        .arg(&fmax)
        .arg(&p2)
        .arg(&scales[0])
        .arg(&scales[1]);
    // SAFETY: `history` holds len x n floats, the scale arrays n floats each.
    unsafe { b.launch(cfg) }.map_err(BenchError::driver)?;
    Ok(())
}

/// MXFP8 casts of the row-major bf16 `[rows, cols]` matrix at `src`: `row` = (data, scales) of
/// the rowwise cast (blocks along `cols`), `col` = (data, scales) of the transposed cast (blocks
/// along `rows`, written `[cols, rows]`). Dimensions must be multiples of 32; sm_100+ only (the
/// caller checks the device).
pub(crate) fn quant_mx(
    gpu: &Gpu,
    src: u64,
    rows: u64,
    cols: u64,
    row: Option<(u64, u64)>,
    col: Option<(u64, u64)>,
) -> Result<(), BenchError> {
    if rows == 0 {
        return Ok(());
    }
    if !rows.is_multiple_of(32) || !cols.is_multiple_of(32) {
        return Err(BenchError::Unsupported(format!(
            "MXFP8 casts need both dimensions in multiples of 32 ({rows} x {cols})"
        )));
    }
    let blocks = rows * cols / 32;
    let cfg = LaunchConfig {
        grid_dim: (blocks.div_ceil(128) as u32, 1, 1),
        block_dim: (128, 1, 1),
        shared_mem_bytes: 0,
    };
    for (out, kernel) in [(row, &gpu.k.quant_mx_rows), (col, &gpu.k.quant_mx_cols)] {
        let Some((q, s)) = out else { continue };
        let mut b = gpu.stream.launch_builder(kernel);
        b.arg(&src).arg(&rows).arg(&cols).arg(&q).arg(&s);
        // SAFETY: the caller sized q for rows x cols bytes and s for `mx_scale_bytes` of the
        // operand it describes; each thread touches one 32-element block inside them.
        unsafe { b.launch(cfg) }.map_err(BenchError::driver)?;
    }
    Ok(())
}
