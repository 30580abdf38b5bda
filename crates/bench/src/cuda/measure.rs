//! One point: set up buffers, check every kernel and GEMM once, then time fwd+bwd in both
//! precisions with CUDA events, rotating input sets so repeated steps do not hit L2.

use std::collections::HashMap;

use cudarc::driver::{CudaEvent, LaunchConfig, PushKernelArg, sys::CUevent_flags};
use fp8_engine::model::Norm;
use fp8_policy::ModuleKind;
use fp8_report::{Point, Stat, Status, Timing};

use super::buffer::DevBuf;
use super::check::{
    Fp8Rows, Sampler, dot, expected_scale, read_bf16, read_bf16_column, read_raw, rel_err,
};
use super::gemm::{Dt, Plan, Ptrs, ScaleMode, Shape};
use super::{Gpu, launch};
use crate::error::BenchError;
use crate::layout::{Segments, blk128_scale_len, round_up};
use crate::sweep::BenchPoint;

/// How to measure.
#[derive(Debug, Clone)]
pub struct MeasureOptions {
    /// Untimed steps first.
    pub warmup: u32,
    /// Timed steps.
    pub iters: u32,
    /// Weights kept as FP8 params: no per-step weight cast.
    pub fp8_param: bool,
    /// Power-of-two scales (TE's default) instead of plain FP32.
    pub pow2_scales: bool,
    /// FP8 row padding multiple (16: what TE asserts).
    pub pad: u64,
    /// cuBLASLt heuristic candidates to time per GEMM shape.
    pub candidates: usize,
    /// Measure BF16.
    pub bf16: bool,
    /// Measure FP8.
    pub fp8: bool,
    /// Seed of the random data.
    pub seed: u32,
    /// Output entries sampled per check.
    pub samples: usize,
}

impl Default for MeasureOptions {
    fn default() -> Self {
        MeasureOptions {
            warmup: 10,
            iters: 10,
            fp8_param: true,
            pow2_scales: true,
            pad: 16,
            candidates: 8,
            bf16: true,
            fp8: true,
            seed: 0x5eed,
            samples: 32,
        }
    }
}

/// Error bounds of the checks (relative Frobenius error over the sampled entries).
pub const GEMM_TOL: f64 = 1e-2;
/// Bound for a dequantized FP8 tensor against its BF16 source (E4M3 has 3 mantissa bits).
pub const QUANT_TOL: f64 = 0.08;

/// Measures one point. Never panics; a failure becomes a `failed`/`skipped` point.
pub fn measure_point(gpu: &mut Gpu, bp: &BenchPoint, opt: &MeasureOptions) -> Point {
    let seg = bp.segments(opt.pad);
    let mut point = bp.report_point(opt.pad);
    match run(gpu, bp, &seg, opt, &mut point) {
        Ok(()) => {}
        Err(BenchError::Check(msg)) => {
            point.status = Status::Failed;
            point.reason = Some(msg);
        }
        Err(e) => {
            point.status = Status::Skipped;
            point.reason = Some(e.to_string());
        }
    }
    // Free everything the point allocated before the next one.
    let _ = gpu.sync();
    point
}

/// Device buffers of one rotation set.
struct Set {
    x: DevBuf,
    w: DevBuf,
    dy: DevBuf,
    // FP8 inputs: padded copies of x and dy, and the FP8 weights.
    xp: Option<DevBuf>,
    dyp: Option<DevBuf>,
    wq: Option<DevBuf>,
    sw: Option<DevBuf>,
    wqt: Option<DevBuf>,
    swt: Option<DevBuf>,
}

struct Outs {
    y: DevBuf,
    dx: DevBuf,
    dw: DevBuf,
    xn: Option<DevBuf>,
    gamma: DevBuf,
    beta: DevBuf,
}

/// Where each expert's FP8 operands and scales live, computed once per point (the timed steps
/// reuse it).
struct Fp8Layout {
    /// Floats of one expert's 128x128 weight scales, and of its transpose's.
    sw_len: u64,
    swt_len: u64,
    /// Per expert: rowwise scale, columnwise scale and columnwise data offsets of x and dy.
    srow_x: Vec<u64>,
    scol_x: Vec<u64>,
    qcol_x: Vec<u64>,
    srow_dy: Vec<u64>,
    scol_dy: Vec<u64>,
    qcol_dy: Vec<u64>,
    /// Totals of the same six tensors.
    sxr_len: u64,
    sxc_len: u64,
    xqc_len: u64,
    sdr_len: u64,
    sdc_len: u64,
    dqc_len: u64,
}

impl Fp8Layout {
    fn new(seg: &Segments, k: u64, n: u64) -> Self {
        let (srow_x, sxr_len) = seg.rowwise_scale_offsets(k);
        let (scol_x, sxc_len) = seg.colwise_scale_offsets(k);
        let (qcol_x, xqc_len) = seg.colwise_data_offsets(k);
        let (srow_dy, sdr_len) = seg.rowwise_scale_offsets(n);
        let (scol_dy, sdc_len) = seg.colwise_scale_offsets(n);
        let (qcol_dy, dqc_len) = seg.colwise_data_offsets(n);
        Fp8Layout {
            sw_len: round_up(blk128_scale_len(n, k), 4),
            swt_len: round_up(blk128_scale_len(k, n), 4),
            srow_x,
            scol_x,
            qcol_x,
            srow_dy,
            scol_dy,
            qcol_dy,
            sxr_len,
            sxc_len,
            xqc_len,
            sdr_len,
            sdc_len,
            dqc_len,
        }
    }
}

struct Fp8Outs {
    lay: Fp8Layout,
    xq_row: DevBuf,
    sx_row: DevBuf,
    xq_col: DevBuf,
    sx_col: DevBuf,
    dyq_row: DevBuf,
    sdy_row: DevBuf,
    dyq_col: DevBuf,
    sdy_col: DevBuf,
    y: DevBuf,
    dx: DevBuf,
    dw: DevBuf,
    xn: Option<DevBuf>,
    tiles_x: DevBuf,
    n_tiles_x: u32,
    tiles_dy: DevBuf,
    n_tiles_dy: u32,
}

struct Dims {
    k: u64,
    n: u64,
    g: u64,
    rows: u64,
    /// Logical rows per expert and their offsets (BF16 layout).
    splits: Vec<u64>,
    offsets: Vec<u64>,
    norm: Option<Norm>,
}

fn run(
    gpu: &mut Gpu,
    bp: &BenchPoint,
    seg: &Segments,
    opt: &MeasureOptions,
    point: &mut Point,
) -> Result<(), BenchError> {
    let s = &bp.spec;
    let (k, n, g) = (s.in_features, s.out_features, u64::from(s.num_gemms));
    let norm = if s.module_kind == ModuleKind::LayernormColumn {
        s.norm.or(Some(Norm::RmsNorm))
    } else {
        None
    };
    if norm.is_some() && !k.is_multiple_of(8) {
        return Err(BenchError::Unsupported(format!(
            "norm over {k} features: needs a multiple of 8"
        )));
    }
    let fp8_ok = k.is_multiple_of(16) && n.is_multiple_of(16);
    if opt.fp8 && !fp8_ok {
        return Err(BenchError::Unsupported(format!(
            "FP8 needs in/out features that are multiples of 16 ({k} x {n}); TE asserts the same, so this module cannot run FP8"
        )));
    }
    let mut offsets = Vec::new();
    let mut at = 0;
    for r in &bp.splits {
        offsets.push(at);
        at += r;
    }
    let d = Dims {
        k,
        n,
        g,
        rows: bp.rows(),
        splits: bp.splits.clone(),
        offsets,
        norm,
    };
    let p_rows = seg.total_padded();
    // Rotation sets: enough that the inputs of one step are not in L2 when it runs again.
    let set_bytes = 2 * (d.rows * k + d.rows * n + g * n * k)
        + if opt.fp8 {
            2 * (p_rows * k + p_rows * n) + 2 * g * n * k
        } else {
            0
        };
    let sets = ((3 * gpu.l2_bytes).div_ceil(set_bytes.max(1))).clamp(1, 8) as usize;
    let (free, _) = gpu.mem_info()?;
    let need = crate::sweep::point_bytes(bp, opt.pad) + (sets as u64 - 1) * set_bytes;
    if need > free.saturating_sub(1 << 30) {
        return Err(BenchError::OutOfMemory {
            bytes: need,
            detail: format!("{free} bytes free"),
        });
    }
    // Allocate and fill.
    let mut rot = Vec::with_capacity(sets);
    for i in 0..sets {
        let seed = opt.seed.wrapping_add(i as u32 * 7919);
        let set = Set {
            x: gpu.alloc(2 * d.rows * k)?,
            w: gpu.alloc(2 * g * n * k)?,
            dy: gpu.alloc(2 * d.rows * n)?,
            xp: None,
            dyp: None,
            wq: None,
            sw: None,
            wqt: None,
            swt: None,
        };
        gpu.fill_normal(set.x.ptr(), d.rows * k, seed, 1.0)?;
        gpu.fill_normal(set.w.ptr(), g * n * k, seed ^ 0xa5a5, 0.05)?;
        gpu.fill_normal(set.dy.ptr(), d.rows * n, seed ^ 0x5a5a, 1.0)?;
        rot.push(set);
    }
    let outs = Outs {
        y: gpu.alloc(2 * d.rows * n)?,
        dx: gpu.alloc(2 * d.rows * k)?,
        dw: gpu.alloc(2 * g * n * k)?,
        xn: if norm.is_some() {
            Some(gpu.alloc(2 * d.rows * k)?)
        } else {
            None
        },
        gamma: gpu.alloc(2 * k)?,
        beta: gpu.alloc(2 * k)?,
    };
    gpu.fill_normal(outs.gamma.ptr(), k, opt.seed ^ 0x77, 1.0)?;
    gpu.fill_normal(outs.beta.ptr(), k, opt.seed ^ 0x78, 0.1)?;
    let fp8 = if opt.fp8 {
        Some(setup_fp8(gpu, &mut rot, &d, seg, opt)?)
    } else {
        None
    };

    // Plans (one per distinct shape).
    let mut plans: HashMap<Shape, Plan> = HashMap::new();
    let mut plan_for = |gpu: &Gpu, sh: Shape| -> Result<Shape, BenchError> {
        if let std::collections::hash_map::Entry::Vacant(e) = plans.entry(sh) {
            e.insert(gpu.lt.plan(sh)?);
        }
        Ok(sh)
    };
    let mut bf16_shapes = Vec::new();
    for &r in &d.splits {
        bf16_shapes.push(if r == 0 {
            None
        } else {
            Some((
                plan_for(
                    gpu,
                    Shape {
                        m: n,
                        n: r,
                        k,
                        ta: true,
                        tb: false,
                        dt: Dt::Bf16,
                        scales: None,
                    },
                )?,
                plan_for(
                    gpu,
                    Shape {
                        m: k,
                        n: r,
                        k: n,
                        ta: false,
                        tb: false,
                        dt: Dt::Bf16,
                        scales: None,
                    },
                )?,
                plan_for(
                    gpu,
                    Shape {
                        m: k,
                        n,
                        k: r,
                        ta: false,
                        tb: true,
                        dt: Dt::Bf16,
                        scales: None,
                    },
                )?,
            ))
        });
    }
    let mut fp8_shapes = Vec::new();
    if fp8.is_some() {
        let sc = |a, b| Some((a, b));
        for &p in &seg.padded {
            fp8_shapes.push(if p == 0 {
                None
            } else {
                Some((
                    plan_for(
                        gpu,
                        Shape {
                            m: n,
                            n: p,
                            k,
                            ta: true,
                            tb: false,
                            dt: Dt::E4m3,
                            scales: sc(ScaleMode::Blk128, ScaleMode::Vec128),
                        },
                    )?,
                    plan_for(
                        gpu,
                        Shape {
                            m: k,
                            n: p,
                            k: n,
                            ta: true,
                            tb: false,
                            dt: Dt::E4m3,
                            scales: sc(ScaleMode::Blk128, ScaleMode::Vec128),
                        },
                    )?,
                    plan_for(
                        gpu,
                        Shape {
                            m: k,
                            n,
                            k: p,
                            ta: true,
                            tb: false,
                            dt: Dt::E4m3,
                            scales: sc(ScaleMode::Vec128, ScaleMode::Vec128),
                        },
                    )?,
                ))
            });
        }
    }
    let ctx = Ctx {
        d: &d,
        seg,
        opt,
        outs: &outs,
        fp8: fp8.as_ref(),
        plans: &plans,
        bf16_shapes: &bf16_shapes,
        fp8_shapes: &fp8_shapes,
    };

    // Correctness first: poison the outputs, run one step of each precision, check.
    let scratch = gpu.alloc(4)?;
    if opt.bf16 {
        for b in [&outs.y, &outs.dx, &outs.dw] {
            b.fill_bytes(&gpu.stream, 0xff)?;
        }
        bf16_step(gpu, &ctx, &rot[0], &mut NoMarks)?;
        check_nonfinite(
            gpu,
            &scratch,
            &[
                (&outs.y, d.rows * n, "bf16 fprop"),
                (&outs.dx, d.rows * k, "bf16 dgrad"),
                (&outs.dw, g * n * k, "bf16 wgrad"),
            ],
        )?;
        check_bf16(gpu, &ctx, &rot[0], point)?;
    }
    if let Some(f) = &fp8 {
        for b in [&f.y, &f.dx, &f.dw] {
            b.fill_bytes(&gpu.stream, 0xff)?;
        }
        fp8_step(gpu, &ctx, &rot[0], &mut NoMarks)?;
        check_nonfinite(
            gpu,
            &scratch,
            &[
                (&f.y, p_rows * n, "fp8 fprop"),
                (&f.dx, p_rows * k, "fp8 dgrad"),
                (&f.dw, g * n * k, "fp8 wgrad"),
            ],
        )?;
        check_fp8(gpu, &ctx, &rot[0], point)?;
    }

    // Timing.
    if opt.bf16 {
        point.bf16 = Some(time(gpu, &ctx, &rot, bf16_step)?);
    }
    if opt.fp8 {
        point.fp8 = Some(time(gpu, &ctx, &rot, fp8_step)?);
    }
    if let (Some(b), Some(f)) = (point.bf16, point.fp8) {
        point.speedup = Some(b.total_ms.median / f.total_ms.median);
    }
    Ok(())
}

fn setup_fp8(
    gpu: &Gpu,
    rot: &mut [Set],
    d: &Dims,
    seg: &Segments,
    opt: &MeasureOptions,
) -> Result<Fp8Outs, BenchError> {
    let (k, n, g) = (d.k, d.n, d.g);
    let p = seg.total_padded();
    let lay = Fp8Layout::new(seg, k, n);
    let (sw_len, swt_len) = (lay.sw_len, lay.swt_len);
    for set in rot.iter_mut() {
        // Padded BF16 inputs: the logical rows of each expert at its padded offset, zeros in
        // the pad rows (what the trainer's padding produces).
        let xp = gpu.alloc(2 * p * k)?;
        let dyp = gpu.alloc(2 * p * n)?;
        xp.zero(&gpu.stream)?;
        dyp.zero(&gpu.stream)?;
        let mut src_row = 0;
        for (e, &r) in seg.rows.iter().enumerate() {
            copy_d2d(
                gpu,
                xp.at(2 * seg.offsets[e] * k),
                set.x.at(2 * src_row * k),
                2 * r * k,
            )?;
            copy_d2d(
                gpu,
                dyp.at(2 * seg.offsets[e] * n),
                set.dy.at(2 * src_row * n),
                2 * r * n,
            )?;
            src_row += r;
        }
        let wq = gpu.alloc(g * n * k)?;
        let sw = gpu.alloc(4 * g * sw_len)?;
        let wqt = gpu.alloc(g * n * k)?;
        let swt = gpu.alloc(4 * g * swt_len)?;
        set.xp = Some(xp);
        set.dyp = Some(dyp);
        set.wq = Some(wq);
        set.sw = Some(sw);
        set.wqt = Some(wqt);
        set.swt = Some(swt);
        if opt.fp8_param {
            // FP8 params: the weights are quantized once, outside the step.
            quant_weights(gpu, set, d, opt.pow2_scales)?;
        }
    }
    let (tiles_x, n_tiles_x) = gpu.upload_tiles(seg, k)?;
    let (tiles_dy, n_tiles_dy) = gpu.upload_tiles(seg, n)?;
    Ok(Fp8Outs {
        xq_row: gpu.alloc(p * k)?,
        sx_row: gpu.alloc(4 * lay.sxr_len)?,
        xq_col: gpu.alloc(lay.xqc_len)?,
        sx_col: gpu.alloc(4 * lay.sxc_len)?,
        dyq_row: gpu.alloc(p * n)?,
        sdy_row: gpu.alloc(4 * lay.sdr_len)?,
        dyq_col: gpu.alloc(lay.dqc_len)?,
        sdy_col: gpu.alloc(4 * lay.sdc_len)?,
        y: gpu.alloc(2 * p * n)?,
        dx: gpu.alloc(2 * p * k)?,
        dw: gpu.alloc(2 * g * n * k)?,
        xn: if d.norm.is_some() {
            Some(gpu.alloc(2 * p * k)?)
        } else {
            None
        },
        tiles_x,
        n_tiles_x,
        tiles_dy,
        n_tiles_dy,
        lay,
    })
}

fn copy_d2d(gpu: &Gpu, dst: u64, src: u64, bytes: u64) -> Result<(), BenchError> {
    if bytes == 0 {
        return Ok(());
    }
    // SAFETY: both ranges lie inside live allocations of this point.
    unsafe {
        cudarc::driver::result::memcpy_dtod_async(dst, src, bytes as usize, gpu.stream.cu_stream())
    }
    .map_err(BenchError::driver)
}

fn zero_slice(gpu: &Gpu, addr: u64, bytes: u64) -> Result<(), BenchError> {
    // SAFETY: the slice lies inside this point's weight-gradient buffer.
    unsafe {
        cudarc::driver::result::memset_d8_async(addr, 0, bytes as usize, gpu.stream.cu_stream())
    }
    .map_err(BenchError::driver)
}

fn quant_weights(gpu: &Gpu, set: &Set, d: &Dims, pow2: bool) -> Result<u32, BenchError> {
    let (k, n) = (d.k, d.n);
    let sw_len = round_up(blk128_scale_len(n, k), 4);
    let swt_len = round_up(blk128_scale_len(k, n), 4);
    let (Some(wq), Some(sw), Some(wqt), Some(swt)) = (&set.wq, &set.sw, &set.wqt, &set.swt) else {
        return Err(BenchError::Internal("FP8 weights not allocated".into()));
    };
    for e in 0..d.g {
        let out = [
            wq.at(e * n * k),
            sw.at(4 * e * sw_len),
            wqt.at(e * n * k),
            swt.at(4 * e * swt_len),
        ];
        launch::quant_128x128(gpu, set.w.at(2 * e * n * k), n, k, pow2, out)?;
    }
    Ok(d.g as u32)
}

struct Ctx<'a> {
    d: &'a Dims,
    seg: &'a Segments,
    opt: &'a MeasureOptions,
    outs: &'a Outs,
    fp8: Option<&'a Fp8Outs>,
    plans: &'a HashMap<Shape, Plan>,
    bf16_shapes: &'a [Option<(Shape, Shape, Shape)>],
    fp8_shapes: &'a [Option<(Shape, Shape, Shape)>],
}

/// Where a step records its phase boundaries.
trait Marks {
    /// Called at: 0 start, 1 after forward casts, 2 end of forward, 3 after backward casts,
    /// 4 end of backward.
    fn mark(&mut self, gpu: &Gpu, at: usize) -> Result<(), BenchError>;
}

struct NoMarks;
impl Marks for NoMarks {
    fn mark(&mut self, _: &Gpu, _: usize) -> Result<(), BenchError> {
        Ok(())
    }
}

struct EventMarks<'a>(&'a [CudaEvent]);
impl Marks for EventMarks<'_> {
    fn mark(&mut self, gpu: &Gpu, at: usize) -> Result<(), BenchError> {
        self.0[at].record(&gpu.stream).map_err(BenchError::driver)
    }
}

fn gemm(gpu: &mut Gpu, ctx: &Ctx<'_>, sh: Shape, p: Ptrs) -> Result<(), BenchError> {
    let plan = ctx
        .plans
        .get(&sh)
        .ok_or_else(|| BenchError::Internal(format!("no plan for {sh:?}")))?;
    gpu.lt.run(plan, &p, ctx.opt.candidates)
}

#[allow(clippy::too_many_arguments)]
fn norm(
    gpu: &Gpu,
    ctx: &Ctx<'_>,
    x: u64,
    rows: u64,
    y: u64,
    q: u64,
    s_row: u64,
    ld_srow: u64,
) -> Result<(), BenchError> {
    let Some(kind) = ctx.d.norm else {
        return Ok(());
    };
    let k = ctx.d.k;
    if rows == 0 {
        return Ok(());
    }
    let cfg = LaunchConfig {
        grid_dim: (rows as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let ln = i32::from(kind == Norm::LayerNorm);
    let eps = 1e-5f32;
    let p2 = i32::from(ctx.opt.pow2_scales);
    let (gamma, beta) = (ctx.outs.gamma.ptr(), ctx.outs.beta.ptr());
    let mut b = gpu.stream.launch_builder(&gpu.k.norm_fwd);
    b.arg(&x)
        .arg(&gamma)
        .arg(&beta)
        .arg(&rows)
        .arg(&k)
        .arg(&ln)
        .arg(&eps)
        .arg(&y)
        .arg(&q)
        .arg(&s_row)
        .arg(&ld_srow)
        .arg(&p2);
    // SAFETY: x/y are [rows, k] bf16, q is [rows, k] fp8 or null, scales sized by the caller.
    unsafe { b.launch(cfg) }.map_err(BenchError::driver)?;
    Ok(())
}

fn bf16_step(
    gpu: &mut Gpu,
    ctx: &Ctx<'_>,
    set: &Set,
    marks: &mut dyn Marks,
) -> Result<u32, BenchError> {
    let d = ctx.d;
    let (k, n) = (d.k, d.n);
    let mut launches = 0;
    marks.mark(gpu, 0)?;
    let x = match &ctx.outs.xn {
        Some(xn) => {
            norm(gpu, ctx, set.x.ptr(), d.rows, xn.ptr(), 0, 0, 0)?;
            launches += 1;
            xn.ptr()
        }
        None => set.x.ptr(),
    };
    marks.mark(gpu, 1)?;
    for (e, sh) in ctx.bf16_shapes.iter().enumerate() {
        let Some((f, _, _)) = sh else { continue };
        let (r0, e) = (d.offsets[e], e as u64);
        gemm(
            gpu,
            ctx,
            *f,
            Ptrs {
                a: set.w.at(2 * e * n * k),
                b: x + 2 * r0 * k,
                d: ctx.outs.y.at(2 * r0 * n),
                sa: 0,
                sb: 0,
            },
        )?;
        launches += 1;
    }
    marks.mark(gpu, 2)?;
    marks.mark(gpu, 3)?;
    for (e, sh) in ctx.bf16_shapes.iter().enumerate() {
        let Some((_, dg, wg)) = sh else {
            // An expert that received no tokens still has a weight gradient: zeros.
            zero_slice(gpu, ctx.outs.dw.at(2 * e as u64 * n * k), 2 * n * k)?;
            launches += 1;
            continue;
        };
        let (r0, e) = (d.offsets[e], e as u64);
        gemm(
            gpu,
            ctx,
            *dg,
            Ptrs {
                a: set.w.at(2 * e * n * k),
                b: set.dy.at(2 * r0 * n),
                d: ctx.outs.dx.at(2 * r0 * k),
                sa: 0,
                sb: 0,
            },
        )?;
        gemm(
            gpu,
            ctx,
            *wg,
            Ptrs {
                a: x + 2 * r0 * k,
                b: set.dy.at(2 * r0 * n),
                d: ctx.outs.dw.at(2 * e * n * k),
                sa: 0,
                sb: 0,
            },
        )?;
        launches += 2;
    }
    marks.mark(gpu, 4)?;
    Ok(launches)
}

fn fp8_step(
    gpu: &mut Gpu,
    ctx: &Ctx<'_>,
    set: &Set,
    marks: &mut dyn Marks,
) -> Result<u32, BenchError> {
    let (d, seg, opt) = (ctx.d, ctx.seg, ctx.opt);
    let f = ctx
        .fp8
        .ok_or_else(|| BenchError::Internal("fp8 buffers missing".into()))?;
    let (Some(xp), Some(dyp), Some(wq), Some(sw), Some(wqt), Some(swt)) =
        (&set.xp, &set.dyp, &set.wq, &set.sw, &set.wqt, &set.swt)
    else {
        return Err(BenchError::Internal("fp8 set incomplete".into()));
    };
    let (k, n) = (d.k, d.n);
    let p = seg.total_padded();
    let mut launches = 0;
    marks.mark(gpu, 0)?;
    match &f.xn {
        Some(xn) => {
            // Fused norm + rowwise cast, then the columnwise cast of the normalized input.
            norm(
                gpu,
                ctx,
                xp.ptr(),
                p,
                xn.ptr(),
                f.xq_row.ptr(),
                f.sx_row.ptr(),
                round_up(p, 4),
            )?;
            launch::quant_1x128(
                gpu,
                xn.ptr(),
                k,
                f.tiles_x.ptr(),
                f.n_tiles_x,
                false,
                true,
                opt.pow2_scales,
                [0, 0, f.xq_col.ptr(), f.sx_col.ptr()],
            )?;
            launches += 2;
        }
        None => {
            launch::quant_1x128(
                gpu,
                xp.ptr(),
                k,
                f.tiles_x.ptr(),
                f.n_tiles_x,
                true,
                true,
                opt.pow2_scales,
                [
                    f.xq_row.ptr(),
                    f.sx_row.ptr(),
                    f.xq_col.ptr(),
                    f.sx_col.ptr(),
                ],
            )?;
            launches += 1;
        }
    }
    if !opt.fp8_param {
        launches += quant_weights(gpu, set, d, opt.pow2_scales)?;
    }
    marks.mark(gpu, 1)?;
    let Fp8Layout {
        sw_len,
        swt_len,
        srow_x,
        scol_x,
        qcol_x,
        srow_dy,
        scol_dy,
        qcol_dy,
        ..
    } = &f.lay;
    let (sw_len, swt_len) = (*sw_len, *swt_len);
    for (e, sh) in ctx.fp8_shapes.iter().enumerate() {
        let Some((fp, _, _)) = sh else { continue };
        let (r0, eu) = (seg.offsets[e], e as u64);
        gemm(
            gpu,
            ctx,
            *fp,
            Ptrs {
                a: wq.at(eu * n * k),
                b: f.xq_row.at(r0 * k),
                d: f.y.at(2 * r0 * n),
                sa: sw.at(4 * eu * sw_len),
                sb: f.sx_row.at(4 * srow_x[e]),
            },
        )?;
        launches += 1;
    }
    marks.mark(gpu, 2)?;
    launch::quant_1x128(
        gpu,
        dyp.ptr(),
        n,
        f.tiles_dy.ptr(),
        f.n_tiles_dy,
        true,
        true,
        opt.pow2_scales,
        [
            f.dyq_row.ptr(),
            f.sdy_row.ptr(),
            f.dyq_col.ptr(),
            f.sdy_col.ptr(),
        ],
    )?;
    launches += 1;
    marks.mark(gpu, 3)?;
    for (e, sh) in ctx.fp8_shapes.iter().enumerate() {
        let Some((_, dg, wg)) = sh else {
            zero_slice(gpu, f.dw.at(2 * e as u64 * n * k), 2 * n * k)?;
            launches += 1;
            continue;
        };
        let (r0, eu) = (seg.offsets[e], e as u64);
        gemm(
            gpu,
            ctx,
            *dg,
            Ptrs {
                a: wqt.at(eu * n * k),
                b: f.dyq_row.at(r0 * n),
                d: f.dx.at(2 * r0 * k),
                sa: swt.at(4 * eu * swt_len),
                sb: f.sdy_row.at(4 * srow_dy[e]),
            },
        )?;
        gemm(
            gpu,
            ctx,
            *wg,
            Ptrs {
                a: f.xq_col.at(qcol_x[e]),
                b: f.dyq_col.at(qcol_dy[e]),
                d: f.dw.at(2 * eu * n * k),
                sa: f.sx_col.at(4 * scol_x[e]),
                sb: f.sdy_col.at(4 * scol_dy[e]),
            },
        )?;
        launches += 2;
    }
    marks.mark(gpu, 4)?;
    Ok(launches)
}

type StepFn = fn(&mut Gpu, &Ctx<'_>, &Set, &mut dyn Marks) -> Result<u32, BenchError>;

fn time(gpu: &mut Gpu, ctx: &Ctx<'_>, rot: &[Set], step: StepFn) -> Result<Timing, BenchError> {
    let opt = ctx.opt;
    let mut launches = 0;
    let mut host = std::time::Duration::ZERO;
    for i in 0..opt.warmup as usize {
        let t = std::time::Instant::now();
        launches = step(gpu, ctx, &rot[i % rot.len()], &mut NoMarks)?;
        host = host.max(t.elapsed());
    }
    let iters = opt.iters.max(1) as usize;
    // The timed steps are queued behind a spin kernel that outlasts their enqueueing, so that
    // on small points the events measure the GPU, not how fast this process launches kernels.
    let spin_ns = (host.as_nanos() as u64)
        .saturating_mul(iters as u64 * 5 / 4)
        .saturating_add(20_000)
        .min(50_000_000);
    gpu.spin(spin_ns)?;
    let events: Vec<CudaEvent> = (0..5 * iters)
        .map(|_| {
            gpu.ctx
                .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(BenchError::driver)
        })
        .collect::<Result<_, _>>()?;
    for i in 0..iters {
        launches = step(
            gpu,
            ctx,
            &rot[i % rot.len()],
            &mut EventMarks(&events[5 * i..5 * i + 5]),
        )?;
    }
    gpu.sync()?;
    let mut fwd = Vec::new();
    let mut bwd = Vec::new();
    let mut total = Vec::new();
    let mut cast = Vec::new();
    for i in 0..iters {
        let e = &events[5 * i..5 * i + 5];
        let el = |a: usize, b: usize| {
            e[a].elapsed_ms(&e[b])
                .map(f64::from)
                .map_err(BenchError::driver)
        };
        fwd.push(el(0, 2)?);
        bwd.push(el(2, 4)?);
        total.push(el(0, 4)?);
        cast.push(el(0, 1)? + el(2, 3)?);
    }
    let st = |v: &[f64]| Stat::of(v).unwrap_or_default();
    Ok(Timing {
        fwd_ms: st(&fwd),
        bwd_ms: st(&bwd),
        total_ms: st(&total),
        cast_ms: st(&cast),
        launches,
    })
}

fn check_nonfinite(
    gpu: &Gpu,
    scratch: &DevBuf,
    outs: &[(&DevBuf, u64, &str)],
) -> Result<(), BenchError> {
    for (b, len, what) in outs {
        let c = gpu.count_nonfinite(b.ptr(), *len, scratch)?;
        if c > 0 {
            return Err(BenchError::Check(format!(
                "{what}: {c} non-finite or unwritten outputs"
            )));
        }
    }
    Ok(())
}

fn record(point: &mut Point, name: &str, err: f64, tol: f64) -> Result<(), BenchError> {
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
fn pick_row(s: &mut Sampler, splits: &[u64], offsets: &[u64]) -> Option<(usize, u64, u64)> {
    let live: Vec<usize> = (0..splits.len()).filter(|&e| splits[e] > 0).collect();
    if live.is_empty() {
        return None;
    }
    let e = live[s.below(live.len() as u64) as usize];
    let r = s.below(splits[e]);
    Some((e, offsets[e] + r, r))
}

fn check_bf16(gpu: &Gpu, ctx: &Ctx<'_>, set: &Set, point: &mut Point) -> Result<(), BenchError> {
    let d = ctx.d;
    let (k, n) = (d.k, d.n);
    let st = &gpu.stream;
    let x = ctx.outs.xn.as_ref().map_or(set.x.ptr(), DevBuf::ptr);
    let mut s = Sampler::new(u64::from(ctx.opt.seed) ^ 0xbf16);
    let (mut got, mut want) = (vec![], vec![]);
    let (mut gd, mut wd) = (vec![], vec![]);
    let (mut gw, mut ww) = (vec![], vec![]);
    for _ in 0..ctx.opt.samples {
        let Some((e, row, _)) = pick_row(&mut s, &d.splits, &d.offsets) else {
            break;
        };
        let eu = e as u64;
        let j = s.below(n);
        let xr: Vec<f64> = read_bf16(st, x + 2 * row * k, k)?
            .into_iter()
            .map(f64::from)
            .collect();
        let wr: Vec<f64> = read_bf16(st, set.w.at(2 * (eu * n + j) * k), k)?
            .into_iter()
            .map(f64::from)
            .collect();
        want.push(dot(&xr, &wr));
        got.push(f64::from(
            read_bf16(st, ctx.outs.y.at(2 * (row * n + j)), 1)?[0],
        ));
        // dgrad: dX[row][c] = dY[row] . W[:, c]
        let c = s.below(k);
        let dyr: Vec<f64> = read_bf16(st, set.dy.at(2 * row * n), n)?
            .into_iter()
            .map(f64::from)
            .collect();
        let wc: Vec<f64> = read_bf16_column(st, set.w.at(2 * eu * n * k), k, c, 0, n)?
            .into_iter()
            .map(f64::from)
            .collect();
        wd.push(dot(&dyr, &wc));
        gd.push(f64::from(
            read_bf16(st, ctx.outs.dx.at(2 * (row * k + c)), 1)?[0],
        ));
        // wgrad: dW[j][c] = dY[:, j] . X[:, c] over the expert's rows
        let r0 = d.offsets[e];
        let rows = d.splits[e];
        let dyc: Vec<f64> = read_bf16_column(st, set.dy.ptr(), n, j, r0, rows)?
            .into_iter()
            .map(f64::from)
            .collect();
        let xc: Vec<f64> = read_bf16_column(st, x, k, c, r0, rows)?
            .into_iter()
            .map(f64::from)
            .collect();
        ww.push(dot(&dyc, &xc));
        gw.push(f64::from(
            read_bf16(st, ctx.outs.dw.at(2 * (eu * n * k + j * k + c)), 1)?[0],
        ));
    }
    record(point, "bf16_fprop", rel_err(&got, &want), GEMM_TOL)?;
    record(point, "bf16_dgrad", rel_err(&gd, &wd), GEMM_TOL)?;
    record(point, "bf16_wgrad", rel_err(&gw, &ww), GEMM_TOL)
}

fn read_f32s(gpu: &Gpu, b: &DevBuf) -> Result<Vec<f32>, BenchError> {
    let mut v = vec![0f32; (b.bytes() / 4) as usize];
    read_raw(&gpu.stream, b.ptr(), &mut v)?;
    Ok(v)
}

fn check_fp8(gpu: &Gpu, ctx: &Ctx<'_>, set: &Set, point: &mut Point) -> Result<(), BenchError> {
    let (d, seg, opt) = (ctx.d, ctx.seg, ctx.opt);
    let f = ctx
        .fp8
        .ok_or_else(|| BenchError::Internal("fp8 buffers missing".into()))?;
    let (Some(xp), Some(dyp), Some(wq), Some(sw), Some(wqt), Some(swt)) =
        (&set.xp, &set.dyp, &set.wq, &set.sw, &set.wqt, &set.swt)
    else {
        return Err(BenchError::Internal("fp8 set incomplete".into()));
    };
    let st = &gpu.stream;
    let (k, n) = (d.k, d.n);
    let x_src = f.xn.as_ref().map_or(xp.ptr(), DevBuf::ptr);
    let (sx_row, sx_col, sdy_row, sdy_col) = (
        read_f32s(gpu, &f.sx_row)?,
        read_f32s(gpu, &f.sx_col)?,
        read_f32s(gpu, &f.sdy_row)?,
        read_f32s(gpu, &f.sdy_col)?,
    );
    let (sw_h, swt_h) = (read_f32s(gpu, sw)?, read_f32s(gpu, swt)?);
    let Fp8Layout {
        srow_x,
        scol_x,
        qcol_x,
        srow_dy,
        scol_dy,
        qcol_dy,
        ..
    } = &f.lay;
    let (sw_len, swt_len) = (f.lay.sw_len as usize, f.lay.swt_len as usize);
    let mut s = Sampler::new(u64::from(opt.seed) ^ 0xf8);
    let mut q = [
        (vec![], vec![]),
        (vec![], vec![]),
        (vec![], vec![]),
        (vec![], vec![]),
    ];
    let mut gm = [(vec![], vec![]), (vec![], vec![]), (vec![], vec![])];
    let mut scale_bad = 0usize;
    for _ in 0..opt.samples {
        let Some((e, prow, local)) = pick_row(&mut s, &seg.rows, &seg.offsets) else {
            break;
        };
        let (eu, p_e) = (e as u64, seg.padded[e]);
        let seg_sx = &sx_row[srow_x[e] as usize..];
        let seg_sdy = &sdy_row[srow_dy[e] as usize..];
        let xq = Fp8Rows {
            data: f.xq_row.at(prow * k),
            rows: p_e,
            cols: k,
            scales: seg_sx,
            blk: false,
        };
        // Rows of the segment: index the scale with the local row.
        let xrow = row_local(st, &xq, local, k)?;
        let xsrc: Vec<f64> = read_bf16(st, x_src + 2 * prow * k, k)?
            .into_iter()
            .map(f64::from)
            .collect();
        push(&mut q[0], &xrow, &xsrc);
        // Scale exactness on the first block of the row.
        let amax = xsrc.iter().take(128).fold(0.0f64, |a, v| a.max(v.abs())) as f32;
        if (expected_scale(amax, opt.pow2_scales) - seg_sx[local as usize]).abs()
            > expected_scale(amax, opt.pow2_scales) * 1e-6
        {
            scale_bad += 1;
        }
        let j = s.below(n);
        let wrow = Fp8Rows {
            data: wq.at(eu * n * k),
            rows: n,
            cols: k,
            scales: &sw_h[e * sw_len..],
            blk: true,
        }
        .row(st, j)?;
        let wsrc: Vec<f64> = read_bf16(st, set.w.at(2 * (eu * n + j) * k), k)?
            .into_iter()
            .map(f64::from)
            .collect();
        push(&mut q[1], &wrow, &wsrc);
        gm[0]
            .0
            .push(f64::from(read_bf16(st, f.y.at(2 * (prow * n + j)), 1)?[0]));
        gm[0].1.push(dot(&xrow, &wrow));
        // dgrad
        let c = s.below(k);
        let dyq = Fp8Rows {
            data: f.dyq_row.at(prow * n),
            rows: p_e,
            cols: n,
            scales: seg_sdy,
            blk: false,
        };
        let dyrow = row_local(st, &dyq, local, n)?;
        let dysrc: Vec<f64> = read_bf16(st, dyp.at(2 * prow * n), n)?
            .into_iter()
            .map(f64::from)
            .collect();
        push(&mut q[2], &dyrow, &dysrc);
        let wtrow = Fp8Rows {
            data: wqt.at(eu * n * k),
            rows: k,
            cols: n,
            scales: &swt_h[e * swt_len..],
            blk: true,
        }
        .row(st, c)?;
        gm[1]
            .0
            .push(f64::from(read_bf16(st, f.dx.at(2 * (prow * k + c)), 1)?[0]));
        gm[1].1.push(dot(&dyrow, &wtrow));
        // wgrad over the padded segment: rows of the transposed operands.
        let xcol = Fp8Rows {
            data: f.xq_col.at(qcol_x[e]),
            rows: k,
            cols: p_e,
            scales: &sx_col[scol_x[e] as usize..],
            blk: false,
        }
        .row(st, c)?;
        let dycol = Fp8Rows {
            data: f.dyq_col.at(qcol_dy[e]),
            rows: n,
            cols: p_e,
            scales: &sdy_col[scol_dy[e] as usize..],
            blk: false,
        }
        .row(st, j)?;
        let xcsrc: Vec<f64> = read_bf16_column(st, x_src, k, c, seg.offsets[e], p_e)?
            .into_iter()
            .map(f64::from)
            .collect();
        push(&mut q[3], &xcol, &xcsrc);
        gm[2].0.push(f64::from(
            read_bf16(st, f.dw.at(2 * (eu * n * k + j * k + c)), 1)?[0],
        ));
        gm[2].1.push(dot(&dycol, &xcol));
    }
    for (i, name) in [
        "fp8_quant_x_rowwise",
        "fp8_quant_w_128x128",
        "fp8_quant_dy_rowwise",
        "fp8_quant_x_colwise",
    ]
    .iter()
    .enumerate()
    {
        record(point, name, rel_err(&q[i].0, &q[i].1), QUANT_TOL)?;
    }
    for (i, name) in ["fp8_fprop", "fp8_dgrad", "fp8_wgrad"].iter().enumerate() {
        record(point, name, rel_err(&gm[i].0, &gm[i].1), GEMM_TOL)?;
    }
    if scale_bad > 0 {
        return Err(BenchError::Check(format!(
            "{scale_bad} rowwise scales differ from amax/448 rounding"
        )));
    }
    Ok(())
}

/// Row `local` of a segment operand whose `data` already points at that row.
fn row_local(
    st: &cudarc::driver::CudaStream,
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
    whole.row(st, local)
}

fn push(acc: &mut (Vec<f64>, Vec<f64>), got: &[f64], want: &[f64]) {
    acc.0.extend_from_slice(got);
    acc.1.extend_from_slice(want);
}
