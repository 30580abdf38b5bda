//! What every check shares: running one step on poisoned outputs, the sampling of rows, the
//! host-side reads, and recording each error against its bound in the point.

use fp8_report::Point;

use super::super::Gpu;
use super::super::buffer::DevBuf;
use super::super::check::{DeviceReader, Fp8Rows, Sampler};
use super::buffers::Set;
use super::ctx::{Ctx, NoMarks, Step};
use crate::error::BenchError;

/// Poisons the FP8 outputs, runs one `step` (any recipe's) and checks that every output was
/// written and finite; `label` names the recipe in the error.
pub(super) fn run_poisoned(
    gpu: &mut Gpu,
    ctx: &Ctx<'_>,
    set: &Set,
    step: &dyn Step,
    label: &str,
) -> Result<(), BenchError> {
    let f = ctx.fp8_outs()?;
    let (d, p_rows) = (ctx.d, ctx.seg.total_padded());
    for b in [&f.y, &f.dx, &f.dw] {
        b.fill_bytes(&gpu.stream, 0xff)?;
    }
    step.step(gpu, ctx, set, &mut NoMarks)?;
    let scratch = gpu.alloc(4)?;
    check_nonfinite(
        gpu,
        &scratch,
        &[
            (&f.y, p_rows * d.n, &format!("{label} fprop")),
            (&f.dx, p_rows * d.k, &format!("{label} dgrad")),
            (&f.dw, d.g * d.n * d.k, &format!("{label} wgrad")),
        ],
    )
}

/// Fails with `what` when any of a buffer's first `len` bf16 values is not finite (the
/// poison, 0xff bytes, is a NaN: an unwritten output fails too).
pub(super) fn check_nonfinite(
    gpu: &Gpu,
    scratch: &DevBuf,
    outs: &[(&DevBuf, u64, &str)],
) -> Result<(), BenchError> {
    for (b, len, what) in outs {
        let c = gpu.count_nonfinite(b, *len, scratch)?;
        if c > 0 {
            return Err(BenchError::Check(format!(
                "{what}: {c} non-finite or unwritten outputs"
            )));
        }
    }
    Ok(())
}

/// Records a check's error in the point; fails when it is above `tol` (or not finite).
pub(super) fn record(point: &mut Point, name: &str, err: f64, tol: f64) -> Result<(), BenchError> {
    point.errors.insert(name.to_owned(), err);
    if err.is_finite() && err <= tol {
        Ok(())
    } else {
        Err(BenchError::Check(format!(
            "{name}: relative error {err:.3e} above the bound {tol:.0e}"
        )))
    }
}

/// Picks an expert with rows and a row inside it.
pub(super) fn pick_row(
    s: &mut Sampler,
    splits: &[u64],
    offsets: &[u64],
) -> Option<(usize, u64, u64)> {
    let live: Vec<usize> = (0..splits.len()).filter(|&e| splits[e] > 0).collect();
    if live.is_empty() {
        return None;
    }
    let e = live[s.below(live.len() as u64) as usize];
    let r = s.below(splits[e]);
    Some((e, offsets[e] + r, r))
}

/// The whole buffer as f32s on the host.
pub(super) fn read_f32s(gpu: &Gpu, b: &DevBuf) -> Result<Vec<f32>, BenchError> {
    let mut v = vec![0f32; (b.bytes() / 4) as usize];
    b.read_into(&gpu.stream, &mut v)?;
    Ok(v)
}

/// Row `local` of a segment operand whose `data` already points at that row.
pub(super) fn row_local(
    rd: &DeviceReader<'_>,
    op: &Fp8Rows<'_>,
    local: u64,
    cols: u64,
) -> Result<Vec<f64>, BenchError> {
    let whole = Fp8Rows {
        data: op.data - local * cols,
        rows: op.rows,
        cols,
        scales: op.scales,
        blk: false,
    };
    whole.row(rd, local)
}

/// Appends one sample's values and their references.
pub(super) fn push(acc: &mut (Vec<f64>, Vec<f64>), got: &[f64], want: &[f64]) {
    acc.0.extend_from_slice(got);
    acc.1.extend_from_slice(want);
}
