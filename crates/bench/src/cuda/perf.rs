//! Device microbenchmarks for docs/PERFORMANCE.md: copy bandwidth, GEMM-only throughput on the
//! anchor shapes, and the quantization kernels' achieved bandwidth.

use cudarc::driver::sys::CUevent_flags;
use serde::Serialize;

use super::buffer::DevBuf;
use super::gemm::{AlgoSearch, Dt, Ptrs, ScaleMode, Shape, TuneInfo};
use super::launch::TensorCast;
use super::{Gpu, launch};
use crate::error::BenchError;
use crate::layout::{Segments, blk128_scale_len, round_up};

/// One measured figure.
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    /// What was measured.
    pub name: String,
    /// Median time in ms.
    pub ms: f64,
    /// TFLOP/s for GEMMs, TB/s for memory-bound kernels.
    pub rate: f64,
    /// `TFLOP/s` or `TB/s`.
    pub unit: &'static str,
    /// Rate relative to the copy bandwidth (memory-bound kernels) or BF16 (FP8 GEMMs).
    pub relative: Option<f64>,
    /// How a GEMM's algorithm was found (candidates timed, the heuristic's time, the winner).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tuning: Option<String>,
    /// A target this figure is held to, and whether it was met in this run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Times `f` (`reps` runs after 3 warmups) with events; median ms.
fn time_ms(
    gpu: &Gpu,
    reps: usize,
    f: impl FnMut() -> Result<(), BenchError>,
) -> Result<f64, BenchError> {
    time_on(&gpu.ctx, &gpu.stream, &gpu.k.spin, reps, f)
}

/// Each timed run is queued behind a spin kernel that outlasts the host's enqueueing of it
/// (measured in the warmups), so the events bracket GPU work only, as a profiler would see it.
fn time_on(
    ctx: &std::sync::Arc<cudarc::driver::CudaContext>,
    stream: &std::sync::Arc<cudarc::driver::CudaStream>,
    spin: &cudarc::driver::CudaFunction,
    reps: usize,
    mut f: impl FnMut() -> Result<(), BenchError>,
) -> Result<f64, BenchError> {
    let mut host = std::time::Duration::ZERO;
    for _ in 0..3 {
        let t = std::time::Instant::now();
        f()?;
        host = host.max(t.elapsed());
    }
    let spin_ns: u64 = (2 * host.as_nanos() as u64 + 50_000).min(20_000_000);
    let mut v = Vec::with_capacity(reps);
    let ev = || {
        ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(BenchError::driver)
    };
    for _ in 0..reps {
        let (a, b) = (ev()?, ev()?);
        super::launch_spin(stream, spin, spin_ns)?;
        a.record(stream).map_err(BenchError::driver)?;
        f()?;
        b.record(stream).map_err(BenchError::driver)?;
        v.push(f64::from(a.elapsed_ms(&b).map_err(BenchError::driver)?));
    }
    Ok(median(v))
}

/// Copy bandwidth: a large device-to-device copy, bytes read + written over time (TB/s).
pub fn copy_bandwidth(gpu: &Gpu) -> Result<Figure, BenchError> {
    let bytes: u64 = 4 << 30;
    let (a, b) = (gpu.alloc(bytes)?, gpu.alloc(bytes)?);
    gpu.fill_normal(&a, bytes / 2, 1, 1.0)?;
    let ms = time_ms(gpu, 10, || {
        // SAFETY: both buffers are `bytes` long.
        unsafe {
            cudarc::driver::result::memcpy_dtod_async(
                b.ptr(),
                a.ptr(),
                bytes as usize,
                gpu.stream.cu_stream(),
            )
        }
        .map_err(BenchError::driver)
    })?;
    Ok(Figure {
        name: "device-to-device copy 4 GiB".into(),
        ms,
        rate: 2.0 * bytes as f64 / ms / 1e9,
        unit: "TB/s",
        relative: None,
        tuning: None,
        target: None,
    })
}

/// GEMM-only throughput of `Y[M,N] = X[M,K] W[N,K]^T` in BF16, FP8 blockwise and FP8
/// tensorwise (per-tensor scales; with split accumulation, as dgrad, wgrad and PyTorch's
/// `_scaled_mm` default run, and with fast accumulation, as TE's fprop runs). Figures in that
/// order.
pub fn gemm_throughput(
    gpu: &mut Gpu,
    m: u64,
    k: u64,
    n: u64,
    search: AlgoSearch,
) -> Result<Vec<Figure>, BenchError> {
    let x = gpu.alloc(2 * m * k)?;
    let w = gpu.alloc(2 * n * k)?;
    let y = gpu.alloc(2 * m * n)?;
    gpu.fill_normal(&x, m * k, 11, 1.0)?;
    gpu.fill_normal(&w, n * k, 12, 0.05)?;
    let flops = 2.0 * (m * k * n) as f64;
    let bf = gpu.lt.plan(Shape::bf16(n, m, k, true, false))?;
    let p = Ptrs {
        a: w.ptr(),
        b: x.ptr(),
        d: y.ptr(),
        sa: 0,
        sb: 0,
    };
    gpu.lt.run_with(&bf, &p, search)?;
    let (ctx, stream, spin) = (gpu.ctx.clone(), gpu.stream.clone(), gpu.k.spin.clone());
    let bf_ms = time_on(&ctx, &stream, &spin, 20, || {
        gpu.lt.run_with(&bf, &p, search)
    })?;
    // FP8 operands.
    let seg = Segments::new(&[m], 16);
    let (tb, n_tiles) = gpu.upload_tiles(&seg, k)?;
    let (xq, sx) = (
        gpu.alloc(m * k)?,
        gpu.alloc(4 * seg.rowwise_scale_offsets(k).1)?,
    );
    let (wq, sw, wqt, swt) = (
        gpu.alloc(n * k)?,
        gpu.alloc(4 * round_up(blk128_scale_len(n, k), 4))?,
        gpu.alloc(n * k)?,
        gpu.alloc(4 * round_up(blk128_scale_len(k, n), 4))?,
    );
    launch::quant_1x128(
        gpu,
        x.ptr(),
        k,
        tb.ptr(),
        n_tiles,
        true,
        false,
        true,
        [xq.ptr(), sx.ptr(), 0, 0],
    )?;
    launch::quant_128x128(
        gpu,
        w.ptr(),
        n,
        k,
        true,
        [wq.ptr(), sw.ptr(), wqt.ptr(), swt.ptr()],
    )?;
    let f8 = gpu.lt.plan(Shape::fp8_tn(
        n,
        m,
        k,
        (Dt::E4m3, Dt::E4m3),
        (ScaleMode::Blk128, ScaleMode::Vec128),
    ))?;
    let p8 = Ptrs {
        a: wq.ptr(),
        b: xq.ptr(),
        d: y.ptr(),
        sa: sw.ptr(),
        sb: sx.ptr(),
    };
    gpu.lt.run_with(&f8, &p8, search)?;
    let f8_ms = time_on(&ctx, &stream, &spin, 20, || {
        gpu.lt.run_with(&f8, &p8, search)
    })?;
    // Per-tensor operands: the blockwise data re-scaled is not what a per-tensor cast makes, so
    // cast again with one scale per tensor.
    let tensor = |src: u64, rows: u64| -> Result<(DevBuf, DevBuf, [DevBuf; 2]), BenchError> {
        let seg = Segments::new(&[rows], 1);
        let (tiles, nt) = gpu.upload_tile_table(&seg.tensor_tiles(k, 0))?;
        let (q, amax, sc, si) = (
            gpu.alloc(rows * k)?,
            gpu.alloc(4)?,
            gpu.alloc(4)?,
            gpu.alloc(4)?,
        );
        amax.zero(&gpu.stream)?;
        launch::amax_tiles(gpu, src, k, tiles.ptr(), nt, amax.ptr())?;
        launch::tensor_scale(gpu, amax.ptr(), 1, false, false, sc.ptr(), si.ptr())?;
        let c = TensorCast {
            scale: sc.ptr(),
            scale_inv: si.ptr(),
            amax_rec: 0,
            row: q.ptr(),
            col: 0,
            e5m2: false,
        };
        launch::cast_tensor(gpu, src, k, tiles.ptr(), nt, c)?;
        Ok((q, si, [tiles, amax]))
    };
    let (xt, sxt, _keep_x) = tensor(x.ptr(), m)?;
    let (wt, swt_t, _keep_w) = tensor(w.ptr(), n)?;
    let pt = Ptrs {
        a: wt.ptr(),
        b: xt.ptr(),
        d: y.ptr(),
        sa: swt_t.ptr(),
        sb: sxt.ptr(),
    };
    let mut tw = Vec::new();
    for fast in [false, true] {
        let mut sh = Shape::fp8_tn(
            n,
            m,
            k,
            (Dt::E4m3, Dt::E4m3),
            (ScaleMode::Tensor, ScaleMode::Tensor),
        );
        sh.fast_accum = fast;
        let plan = gpu.lt.plan(sh)?;
        gpu.lt.run_with(&plan, &pt, search)?;
        let ms = time_on(&ctx, &stream, &spin, 20, || {
            gpu.lt.run_with(&plan, &pt, search)
        })?;
        tw.push((ms, plan.shape()));
    }
    let tuning = |shape: &Shape| gpu.lt.tune_info(shape, search).map(describe_tuning);
    let name = |p: &str| format!("{p} GEMM M={m} K={k} N={n}");
    let bf_rate = flops / bf_ms / 1e9;
    let f8_rate = flops / f8_ms / 1e9;
    let mut out = vec![
        Figure {
            name: name("bf16"),
            ms: bf_ms,
            rate: bf_rate,
            unit: "TFLOP/s",
            relative: None,
            tuning: tuning(&bf.shape()),
            target: None,
        },
        Figure {
            name: name("fp8 blockwise"),
            ms: f8_ms,
            rate: f8_rate,
            unit: "TFLOP/s",
            relative: Some(f8_rate / bf_rate),
            tuning: tuning(&f8.shape()),
            target: None,
        },
    ];
    for ((ms, shape), label) in tw
        .into_iter()
        .zip(["fp8 tensorwise", "fp8 tensorwise fast-accum"])
    {
        let rate = flops / ms / 1e9;
        out.push(Figure {
            name: name(label),
            ms,
            rate,
            unit: "TFLOP/s",
            relative: Some(rate / bf_rate),
            tuning: tuning(&shape),
            target: None,
        });
    }
    Ok(out)
}

fn describe_tuning(t: &TuneInfo) -> String {
    let diff = t.diff_vs_heuristic.map_or(String::new(), |d| {
        format!(", output diff vs heuristic {d:.1e}")
    });
    format!(
        "{} timed ({} configs checked); heuristic {:.4} ms, chosen {:.4} ms: {}{diff}",
        t.timed, t.checked, t.heuristic_ms, t.best_ms, t.best
    )
}

/// Achieved bandwidth of the casts on a `[m, k]` activation and an `[n, k]` weight.
pub fn quant_bandwidth(
    gpu: &Gpu,
    m: u64,
    k: u64,
    copy_tbs: f64,
) -> Result<Vec<Figure>, BenchError> {
    let x = gpu.alloc(2 * m * k)?;
    gpu.fill_normal(&x, m * k, 21, 1.0)?;
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
    let cast = |row: bool, col: bool| {
        launch::quant_1x128(
            gpu,
            x.ptr(),
            k,
            tb.ptr(),
            n_tiles,
            row,
            col,
            true,
            [xq.ptr(), sx.ptr(), xc.ptr(), sc.ptr()],
        )
    };
    let elems = (m * k) as f64;
    let scale_bytes = 4.0 * elems / 128.0;
    // A copy of the same bytes: small tensors are below a wave of CTAs and reach less than the
    // 4 GiB copy, whatever the kernel; this says how much less.
    let copy_dst = gpu.alloc(2 * m * k)?;
    let copy_ms = time_ms(gpu, 20, || {
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
    })?;
    let mut out = vec![bandwidth(
        format!("device-to-device copy [{m}x{k} bf16]"),
        copy_ms,
        4.0 * elems,
        copy_tbs,
    )];
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
    // Per-tensor casts, held to issue 15's targets against the same-size copy: current scaling
    // (zero the amax, amax pass, scale kernel, cast: reads the tensor twice, writes it once) and
    // delayed scaling (one pass that also records the amax).
    let same_copy_tbs = 4.0 * elems / copy_ms / 1e9;
    let seg1 = Segments::new(&[m], 1);
    let (tt, ntt) = gpu.upload_tile_table(&seg1.tensor_tiles(k, 0))?;
    let (amax, sc, si) = (gpu.alloc(4)?, gpu.alloc(4)?, gpu.alloc(4)?);
    let (xqt, xct) = (gpu.alloc(m * k)?, gpu.alloc(m * k)?);
    amax.zero(&gpu.stream)?;
    launch::amax_tiles(gpu, x.ptr(), k, tt.ptr(), ntt, amax.ptr())?;
    launch::tensor_scale(gpu, amax.ptr(), 1, false, true, sc.ptr(), si.ptr())?;
    let tcast = |col: bool, rec: bool| {
        launch::cast_tensor(
            gpu,
            x.ptr(),
            k,
            tt.ptr(),
            ntt,
            TensorCast {
                scale: sc.ptr(),
                scale_inv: si.ptr(),
                amax_rec: if rec { amax.ptr() } else { 0 },
                row: xqt.ptr(),
                col: if col { xct.ptr() } else { 0 },
                e5m2: false,
            },
        )
    };
    let current = |col: bool| -> Result<(), BenchError> {
        amax.zero(&gpu.stream)?;
        launch::amax_tiles(gpu, x.ptr(), k, tt.ptr(), ntt, amax.ptr())?;
        launch::tensor_scale(gpu, amax.ptr(), 1, false, true, sc.ptr(), si.ptr())?;
        tcast(col, false)
    };
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
        let ms = time_ms(gpu, 20, || current(col))?;
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
    // 128x128 weight cast with its transpose on [m, k] viewed as a weight.
    let (wq, sw, wqt, swt) = (
        gpu.alloc(m * k)?,
        gpu.alloc(4 * round_up(blk128_scale_len(m, k), 4))?,
        gpu.alloc(m * k)?,
        gpu.alloc(4 * round_up(blk128_scale_len(k, m), 4))?,
    );
    let ms = time_ms(gpu, 20, || {
        launch::quant_128x128(
            gpu,
            x.ptr(),
            m,
            k,
            true,
            [wq.ptr(), sw.ptr(), wqt.ptr(), swt.ptr()],
        )
    })?;
    out.push(bandwidth(
        format!("cast 128x128 + transpose [{m}x{k}]"),
        ms,
        2.0 * elems + 2.0 * elems,
        copy_tbs,
    ));
    Ok(out)
}

/// A memory-bound figure: `bytes` read + written in `ms`, relative to the copy bandwidth.
fn bandwidth(name: String, ms: f64, bytes: f64, copy_tbs: f64) -> Figure {
    let tbs = bytes / ms / 1e9;
    Figure {
        name,
        ms,
        rate: tbs,
        unit: "TB/s",
        relative: Some(tbs / copy_tbs),
        tuning: None,
        target: None,
    }
}
