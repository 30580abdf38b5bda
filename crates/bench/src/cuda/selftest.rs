//! Whole-tensor checks of the per-tensor kernels against host references, for the GPU tests:
//! the per-point checks sample rows; these read every element of a small tensor.

use super::check::{expected_tensor_scale, fp8_to_f32};
use super::launch::{self, TensorCast, fp8_max};
use super::{DevBuf, Gpu};
use crate::error::BenchError;
use crate::layout::{Segments, TENSOR_SLOT};

/// Floats per tensor slot in the per-tensor arrays.
const TS: usize = TENSOR_SLOT as usize;

fn read<T: bytemuck::Pod + Default + Clone>(
    gpu: &Gpu,
    b: &DevBuf,
    n: u64,
) -> Result<Vec<T>, BenchError> {
    let mut v = vec![T::default(); n as usize];
    b.read_into(&gpu.stream, &mut v)?;
    Ok(v)
}

fn bf16s(gpu: &Gpu, b: &DevBuf, n: u64) -> Result<Vec<f32>, BenchError> {
    Ok(read::<u16>(gpu, b, n)?
        .into_iter()
        .map(|h| half::bf16::from_bits(h).to_f32())
        .collect())
}

/// Current scaling on `segments` stacked segments of `rows x cols` (rows a multiple of 16):
/// the amax of every segment is exact, the scale follows from it, every rowwise element is the
/// source within half an FP8 step, and the transposed copy holds the same bytes transposed.
/// Returns a one-line summary.
pub fn check_tensor_cast(
    gpu: &Gpu,
    rows: &[u64],
    cols: u64,
    e5m2: bool,
    pow2: bool,
) -> Result<String, BenchError> {
    let seg = Segments::new(rows, 16);
    let p = seg.total_padded();
    let g = rows.len() as u64;
    let x = gpu.alloc(2 * p * cols)?;
    x.zero(&gpu.stream)?;
    for (i, &r) in seg.rows.iter().enumerate() {
        // Each segment its own spread, so a mixed-up segment index shows.
        let tmp = gpu.alloc(2 * r.max(1) * cols)?;
        gpu.fill_normal(&tmp, r * cols, 77 + i as u32, 0.5 + i as f32)?;
        x.copy_from(
            &gpu.stream,
            2 * seg.offsets[i] * cols,
            &tmp,
            0,
            2 * r * cols,
        )?;
    }
    let (tiles, nt) = gpu.upload_tile_table(&seg.tensor_tiles(cols, 0))?;
    let (amax, sc, si) = (gpu.alloc(16 * g)?, gpu.alloc(16 * g)?, gpu.alloc(16 * g)?);
    let (qr, qc) = (gpu.alloc(p * cols)?, gpu.alloc(p * cols)?);
    amax.zero(&gpu.stream)?;
    launch::amax_tiles(gpu, x.ptr(), cols, tiles.ptr(), nt, amax.ptr())?;
    launch::tensor_scale(gpu, amax.ptr(), g, e5m2, pow2, sc.ptr(), si.ptr())?;
    let c = TensorCast {
        scale: sc.ptr(),
        scale_inv: si.ptr(),
        amax_rec: 0,
        row: qr.ptr(),
        col: qc.ptr(),
        e5m2,
    };
    launch::cast_tensor(gpu, x.ptr(), cols, tiles.ptr(), nt, c)?;
    let xs = bf16s(gpu, &x, p * cols)?;
    let (am, scs, sis): (Vec<f32>, Vec<f32>, Vec<f32>) = (
        read(gpu, &amax, 4 * g)?,
        read(gpu, &sc, 4 * g)?,
        read(gpu, &si, 4 * g)?,
    );
    let (rq, cq): (Vec<u8>, Vec<u8>) = (read(gpu, &qr, p * cols)?, read(gpu, &qc, p * cols)?);
    let (qcol, _) = seg.colwise_data_offsets(cols);
    let fmax = fp8_max(e5m2);
    // Relative half-step of the format's normals, and its smallest subnormal step.
    let (rel, sub) = if e5m2 {
        (0.125f64, 2f64.powi(-16))
    } else {
        (0.0625, 2f64.powi(-9))
    };
    let mut worst = 0f64;
    for e in 0..g as usize {
        let (r0, pe) = (seg.offsets[e], seg.padded[e]);
        let want = xs[(r0 * cols) as usize..((r0 + pe) * cols) as usize]
            .iter()
            .fold(0f32, |a, v| a.max(v.abs()));
        if am[TS * e] != want {
            return Err(BenchError::Check(format!(
                "segment {e}: amax {} != host {want}",
                am[TS * e]
            )));
        }
        let ws = expected_tensor_scale(want, fmax, pow2);
        if (scs[TS * e] - ws).abs() > ws * 1e-6 || (sis[TS * e] * scs[TS * e] - 1.0).abs() > 1e-6 {
            return Err(BenchError::Check(format!(
                "segment {e}: scale {} (want {ws}), scale_inv {}",
                scs[TS * e],
                sis[TS * e]
            )));
        }
        for r in 0..pe {
            for cc in 0..cols {
                let i = ((r0 + r) * cols + cc) as usize;
                let b = rq[i];
                let tb = cq[(qcol[e] + cc * pe + r) as usize];
                if b != tb {
                    return Err(BenchError::Check(format!(
                        "segment {e} ({r}, {cc}): rowwise byte {b:#x} != transposed {tb:#x}"
                    )));
                }
                let v = f64::from(xs[i]) * f64::from(scs[TS * e]);
                let d = (f64::from(fp8_to_f32(b, e5m2)) - v).abs();
                let bound = (rel * v.abs()).max(sub) * 1.0001;
                worst = worst.max(d / bound);
                if d > bound {
                    return Err(BenchError::Check(format!(
                        "segment {e} ({r}, {cc}): {} quantized to {} (x scale {v}), off by {d} > {bound}",
                        xs[i],
                        fp8_to_f32(b, e5m2)
                    )));
                }
            }
        }
    }
    Ok(format!(
        "{} segment(s) of {cols} columns, {}: amax exact, scales exact, every element within half a step (worst {worst:.3} of the bound), transpose byte-identical",
        g,
        if e5m2 { "E5M2" } else { "E4M3" }
    ))
}

/// Delayed scaling over `steps` steps with growing and shrinking data: after each step the
/// history and the scales equal a host model of TE's update (roll by one, this step's amax
/// last, row 0 cleared; amax = max of the history, or the latest).
pub fn check_delayed(gpu: &Gpu, len: u64, algo_max: bool) -> Result<String, BenchError> {
    let (rows, cols) = (256u64, 512u64);
    let seg = Segments::new(&[rows], 16);
    let (tiles, nt) = gpu.upload_tile_table(&seg.tensor_tiles(cols, 0))?;
    let x = gpu.alloc(2 * rows * cols)?;
    let hist = gpu.alloc(16 * len)?;
    let (sc, si) = (gpu.alloc(16)?, gpu.alloc(16)?);
    let q = gpu.alloc(rows * cols)?;
    hist.zero(&gpu.stream)?;
    sc.write_at(&gpu.stream, 0, &[1.0f32])?;
    let mut host_hist = vec![0f32; len as usize];
    let mut host_scale = 1f32;
    let spreads = [1.0f32, 4.0, 0.25, 0.5, 2.0];
    for (step, &sd) in spreads.iter().enumerate() {
        gpu.fill_normal(&x, rows * cols, 900 + step as u32, sd)?;
        let c = TensorCast {
            scale: sc.ptr(),
            scale_inv: si.ptr(),
            amax_rec: hist.ptr(),
            row: q.ptr(),
            col: 0,
            e5m2: false,
        };
        launch::cast_tensor(gpu, x.ptr(), cols, tiles.ptr(), nt, c)?;
        // The cast used the scale of the previous update and wrote its inverse.
        let used: Vec<f32> = read(gpu, &si, 1)?;
        if (used[0] * host_scale - 1.0).abs() > 1e-6 {
            return Err(BenchError::Check(format!(
                "step {step}: cast wrote scale_inv {} for scale {host_scale}",
                used[0]
            )));
        }
        launch::delayed_update(
            gpu,
            hist.ptr(),
            len,
            1,
            algo_max,
            false,
            false,
            [sc.ptr(), si.ptr()],
        )?;
        let xs = bf16s(gpu, &x, rows * cols)?;
        let a = xs.iter().fold(0f32, |m, v| m.max(v.abs()));
        host_hist[0] = host_hist[0].max(a);
        let amax = if algo_max {
            host_hist.iter().fold(0f32, |m, &v| m.max(v))
        } else {
            host_hist[0]
        };
        host_hist.rotate_left(1);
        host_hist[0] = 0.0;
        if amax > 0.0 {
            host_scale = expected_tensor_scale(amax, 448.0, false);
        }
        let (h, s): (Vec<f32>, Vec<f32>) = (read(gpu, &hist, 4 * len)?, read(gpu, &sc, 1)?);
        let h: Vec<f32> = h.into_iter().step_by(TS).collect();
        if h != host_hist || (s[0] - host_scale).abs() > host_scale * 1e-6 {
            return Err(BenchError::Check(format!(
                "step {step}: history {h:?} scale {} != host {host_hist:?} {host_scale}",
                s[0]
            )));
        }
    }
    Ok(format!(
        "delayed history {len} ({}): {} steps match the host model",
        if algo_max { "max" } else { "most_recent" },
        spreads.len()
    ))
}
