//! The quantization kernels' achieved bandwidth on one activation shape, against the copy.

use super::super::Gpu;
use super::super::buffer::DevBuf;
use super::super::launch::{self, TensorCast};
use super::{Figure, bandwidth, time_ms};
use crate::error::BenchError;
use crate::layout::{Segments, blk128_scale_len, round_up};

/// Achieved bandwidth of the casts on a `[m, k]` activation and an `[n, k]` weight.
pub fn quant_bandwidth(
    gpu: &Gpu,
    m: u64,
    k: u64,
    copy_tbs: f64,
) -> Result<Vec<Figure>, BenchError> {
    let x = gpu.alloc(2 * m * k)?;
    gpu.fill_normal(&x, m * k, 21, 1.0)?;
    let elems = (m * k) as f64;
    let copy_ms = same_size_copy(gpu, &x, m, k)?;
    let mut out = vec![bandwidth(
        format!("device-to-device copy [{m}x{k} bf16]"),
        copy_ms,
        4.0 * elems,
        copy_tbs,
    )];
    out.extend(blockwise_casts(gpu, &x, m, k, copy_tbs)?);
    let same_copy_tbs = 4.0 * elems / copy_ms / 1e9;
    out.extend(per_tensor_casts(gpu, &x, m, k, copy_tbs, same_copy_tbs)?);
    out.push(weight_cast(gpu, &x, m, k, copy_tbs)?);
    Ok(out)
}

/// A copy of the same bytes: small tensors are below a wave of CTAs and reach less than the
/// 4 GiB copy, whatever the kernel; this says how much less.
fn same_size_copy(gpu: &Gpu, x: &DevBuf, m: u64, k: u64) -> Result<f64, BenchError> {
    let copy_dst = gpu.alloc(2 * m * k)?;
    time_ms(gpu, 20, || {
        // SAFETY: both buffers are 2mk bytes long.
        unsafe {
            cudarc::driver::result::memcpy_dtod_async(
                copy_dst.ptr(),
                x.ptr(),
                (2 * m * k) as usize,
                gpu.stream.cu_stream(),
            )
        }
        .map_err(BenchError::driver)
    })
}

/// The 1x128 activation casts, both copies and rowwise alone.
fn blockwise_casts(
    gpu: &Gpu,
    x: &DevBuf,
    m: u64,
    k: u64,
    copy_tbs: f64,
) -> Result<Vec<Figure>, BenchError> {
    let seg = Segments::new(&[m], 16);
    let (tb, n_tiles) = gpu.upload_tiles(&seg, k)?;
    let (xq, sx) = (
        gpu.alloc(m * k)?,
        gpu.alloc(4 * seg.rowwise_scale_offsets(k).1)?,
    );
    let (xc, sc) = (
        gpu.alloc(seg.colwise_data_offsets(k).1)?,
        gpu.alloc(4 * seg.colwise_scale_offsets(k).1)?,
    );
    let io = [xq.ptr(), sx.ptr(), xc.ptr(), sc.ptr()];
    let cast = |row: bool, col: bool| {
        launch::quant_1x128(gpu, x.ptr(), k, tb.ptr(), n_tiles, row, col, true, io)
    };
    let elems = (m * k) as f64;
    let scale_bytes = 4.0 * elems / 128.0;
    let mut out = Vec::new();
    for (name, row, col, bytes) in [
        (
            "1x128 rowwise + columnwise",
            true,
            true,
            2.0 * elems + 2.0 * elems + 2.0 * scale_bytes,
        ),
        (
            "1x128 rowwise only",
            true,
            false,
            2.0 * elems + elems + scale_bytes,
        ),
    ] {
        let ms = time_ms(gpu, 20, || cast(row, col))?;
        out.push(bandwidth(
            format!("cast {name} [{m}x{k}]"),
            ms,
            bytes,
            copy_tbs,
        ));
    }
    Ok(out)
}

/// Per-tensor casts, held to issue 15's targets against the same-size copy: current scaling
/// (zero the amax, amax pass, scale kernel, cast: reads the tensor twice, writes it once) and
/// delayed scaling (one pass that also records the amax).
fn per_tensor_casts(
    gpu: &Gpu,
    x: &DevBuf,
    m: u64,
    k: u64,
    copy_tbs: f64,
    same_copy_tbs: f64,
) -> Result<Vec<Figure>, BenchError> {
    let elems = (m * k) as f64;
    let seg1 = Segments::new(&[m], 1);
    let (tt, ntt) = gpu.upload_tile_table(&seg1.tensor_tiles(k, 0))?;
    let (amax, sc, si) = (gpu.alloc(4)?, gpu.alloc(4)?, gpu.alloc(4)?);
    let (xqt, xct) = (gpu.alloc(m * k)?, gpu.alloc(m * k)?);
    let scales = || -> Result<(), BenchError> {
        amax.zero(&gpu.stream)?;
        launch::amax_tiles(gpu, x.ptr(), k, tt.ptr(), ntt, amax.ptr())?;
        launch::tensor_scale(gpu, amax.ptr(), 1, false, true, sc.ptr(), si.ptr())
    };
    scales()?;
    let tcast = |col: bool, rec: bool| {
        let c = TensorCast {
            scale: sc.ptr(),
            scale_inv: si.ptr(),
            amax_rec: if rec { amax.ptr() } else { 0 },
            row: xqt.ptr(),
            col: if col { xct.ptr() } else { 0 },
            e5m2: false,
        };
        launch::cast_tensor(gpu, x.ptr(), k, tt.ptr(), ntt, c)
    };
    let mut out = Vec::new();
    for (name, col, bytes) in [
        (
            "tensorwise amax + cast rowwise",
            false,
            2.0 * elems + 2.0 * elems + elems,
        ),
        (
            "tensorwise amax + cast + transpose",
            true,
            2.0 * elems + 2.0 * elems + 2.0 * elems,
        ),
    ] {
        let ms = time_ms(gpu, 20, || {
            scales()?;
            tcast(col, false)
        })?;
        let mut f = bandwidth(format!("cast {name} [{m}x{k}]"), ms, bytes, copy_tbs);
        if !col {
            let ratio = ms / (bytes / (same_copy_tbs * 1e9));
            f.target = Some(format!(
                "time {ratio:.3}x that of moving its bytes at the same-size copy's rate (target <= 1.15): {}",
                if ratio <= 1.15 { "met" } else { "NOT met" }
            ));
        }
        out.push(f);
    }
    for (name, col, bytes) in [
        (
            "delayed cast rowwise (amax recorded)",
            false,
            2.0 * elems + elems,
        ),
        (
            "delayed cast + transpose (amax recorded)",
            true,
            2.0 * elems + 2.0 * elems,
        ),
    ] {
        let ms = time_ms(gpu, 20, || tcast(col, true))?;
        let mut f = bandwidth(format!("cast {name} [{m}x{k}]"), ms, bytes, copy_tbs);
        if !col {
            let share = bytes / ms / 1e9 / same_copy_tbs;
            f.target = Some(format!(
                "{share:.3} of the same-size copy's bandwidth (target >= 0.85): {}",
                if share >= 0.85 { "met" } else { "NOT met" }
            ));
        }
        out.push(f);
    }
    Ok(out)
}

/// The 128x128 weight cast with its transpose, on `[m, k]` viewed as a weight.
fn weight_cast(gpu: &Gpu, x: &DevBuf, m: u64, k: u64, copy_tbs: f64) -> Result<Figure, BenchError> {
    let (wq, sw, wqt, swt) = (
        gpu.alloc(m * k)?,
        gpu.alloc(4 * round_up(blk128_scale_len(m, k), 4))?,
        gpu.alloc(m * k)?,
        gpu.alloc(4 * round_up(blk128_scale_len(k, m), 4))?,
    );
    let io = [wq.ptr(), sw.ptr(), wqt.ptr(), swt.ptr()];
    let ms = time_ms(gpu, 20, || {
        launch::quant_128x128(gpu, x.ptr(), m, k, true, io)
    })?;
    let elems = (m * k) as f64;
    Ok(bandwidth(
        format!("cast 128x128 + transpose [{m}x{k}]"),
        ms,
        2.0 * elems + 2.0 * elems,
        copy_tbs,
    ))
}
