//! The CUDA backend: device probe, buffers, NVRTC kernels and cuBLASLt GEMMs.
//!
//! Everything here is behind [`Gpu::open`], which first checks that the CUDA driver, cuBLASLt
//! and NVRTC libraries can be loaded (cudarc panics on a missing library otherwise) and returns a
//! typed [`BenchError`] when they cannot.

mod buffer;
mod check;
mod gemm;
mod launch;
mod measure;
pub mod perf;
pub mod selftest;

use std::sync::Arc;

use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaStream, LaunchConfig, PushKernelArg,
};
use fp8_report::DeviceInfo;

pub use buffer::DevBuf;
pub use gemm::{AlgoSearch, Lt, TuneInfo};
pub use measure::{DEFAULT_ITERS, DEFAULT_WARMUP, MeasureOptions, measure_point};

use crate::error::BenchError;

const KERNELS: &str = include_str!("kernels.cu");

/// A CUDA device ready to benchmark: context, stream, kernels and a cuBLASLt handle.
pub struct Gpu {
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) stream: Arc<CudaStream>,
    _module: Arc<CudaModule>,
    pub(crate) k: Kernels,
    pub(crate) lt: Lt,
    /// Facts about the device for the report.
    pub info: DeviceInfo,
    /// L2 cache size in bytes (for sizing rotation sets).
    pub l2_bytes: u64,
}

pub(crate) struct Kernels {
    pub fill_normal: CudaFunction,
    pub count_nonfinite: CudaFunction,
    /// Row + column or column-only 1x128 casts.
    pub quant_1x128: CudaFunction,
    /// Rowwise-only 1x128 casts (same body, fewer CTAs per SM, no spills).
    pub quant_1x128_rowwise: CudaFunction,
    pub quant_128x128: CudaFunction,
    pub norm_fwd: CudaFunction,
    pub spin: CudaFunction,
    /// Per-tensor recipes: the amax pass, the scale kernel, the cast, the delayed update.
    pub amax_tiles: CudaFunction,
    pub tensor_scale: CudaFunction,
    pub cast_tensor: CudaFunction,
    pub delayed_update: CudaFunction,
    /// MXFP8 casts (sm_100+).
    pub quant_mx_rows: CudaFunction,
    pub quant_mx_cols: CudaFunction,
}

/// Checks that the CUDA libraries load and a device exists, without panicking.
pub fn probe() -> Result<(), BenchError> {
    // SAFETY: these only try to dlopen the libraries.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(BenchError::NoDevice(
            "libcuda.so could not be loaded (no NVIDIA driver)".into(),
        ));
    }
    // SAFETY: only tries to dlopen the library.
    if !unsafe { cudarc::cublaslt::sys::is_culib_present() } {
        return Err(BenchError::MissingLibrary("libcublasLt (CUDA 13 cuBLASLt)"));
    }
    // SAFETY: only tries to dlopen the library.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(BenchError::MissingLibrary("libnvrtc (CUDA 13 NVRTC)"));
    }
    cudarc::driver::result::init()
        .map_err(|e| BenchError::NoDevice(format!("cuInit failed: {e:?}")))?;
    let n = cudarc::driver::result::device::get_count()
        .map_err(|e| BenchError::NoDevice(format!("{e:?}")))?;
    if n < 1 {
        return Err(BenchError::NoDevice(
            "the driver reports 0 CUDA devices".into(),
        ));
    }
    Ok(())
}

/// Number of CUDA devices (after the probe).
pub fn device_count() -> Result<usize, BenchError> {
    probe()?;
    let n = cudarc::driver::result::device::get_count()
        .map_err(|e| BenchError::NoDevice(format!("{e:?}")))?;
    Ok(n.max(0) as usize)
}

impl Gpu {
    /// Opens device `ordinal`: probes, creates the context and stream, compiles the kernels for
    /// the device's arch and creates the cuBLASLt handle.
    pub fn open(ordinal: usize) -> Result<Gpu, BenchError> {
        probe()?;
        let ctx = CudaContext::new(ordinal)
            .map_err(|e| BenchError::NoDevice(format!("device {ordinal}: {e:?}")))?;
        // One stream, no cross-stream tracking: events would only add work to every launch.
        // SAFETY: all work of this tool runs on the single stream below.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.default_stream();
        let (major, minor) = ctx.compute_capability().map_err(BenchError::driver)?;
        if major < 9 {
            return Err(BenchError::Unsupported(format!(
                "compute capability {major}.{minor}: the FP8 blockwise recipe needs 9.0 (Hopper)"
            )));
        }
        let arch: &'static str = match (major, minor) {
            (9, 0) => "sm_90",
            (10, 0) => "sm_100",
            (12, 0) => "sm_120",
            _ => "sm_90",
        };
        let ptx = cudarc::nvrtc::compile_ptx_with_opts(
            KERNELS,
            cudarc::nvrtc::CompileOptions {
                arch: Some(arch),
                options: vec!["-std=c++17".into()],
                ..Default::default()
            },
        )
        .map_err(|e| BenchError::Nvrtc(format!("{e:?}")))?;
        let module = ctx.load_module(ptx).map_err(BenchError::driver)?;
        let f = |name: &str| module.load_function(name).map_err(BenchError::driver);
        let k = Kernels {
            fill_normal: f("fill_normal_bf16")?,
            count_nonfinite: f("count_nonfinite_bf16")?,
            quant_1x128: f("quant_1x128")?,
            quant_1x128_rowwise: f("quant_1x128_rowwise")?,
            quant_128x128: f("quant_128x128")?,
            norm_fwd: f("norm_fwd")?,
            spin: f("spin_ns")?,
            amax_tiles: f("amax_tiles")?,
            tensor_scale: f("tensor_scale")?,
            cast_tensor: f("cast_tensor")?,
            delayed_update: f("delayed_update")?,
            quant_mx_rows: f("quant_mx_rows")?,
            quant_mx_cols: f("quant_mx_cols")?,
        };
        let lt = Lt::new(&stream)?;
        let attr = |a| ctx.attribute(a).map_err(BenchError::driver);
        use cudarc::driver::sys::CUdevice_attribute as A;
        let sm_count = attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32;
        let l2_bytes = attr(A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)? as u64;
        let mut driver = 0;
        // SAFETY: plain out-parameter call.
        unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut driver) };
        let (mut nv_major, mut nv_minor) = (0, 0);
        // SAFETY: plain out-parameter call.
        unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut nv_major, &mut nv_minor) };
        let info = DeviceInfo {
            name: ctx.name().map_err(BenchError::driver)?,
            compute_capability: format!("{major}.{minor}"),
            driver: format!("{}.{}", driver / 1000, (driver % 1000) / 10),
            cublaslt: lt.version_string(),
            nvrtc: format!("{nv_major}.{nv_minor}"),
            sm_count,
        };
        Ok(Gpu {
            ctx,
            stream,
            _module: module,
            k,
            lt,
            info,
            l2_bytes,
        })
    }

    /// Free and total device memory in bytes.
    pub fn mem_info(&self) -> Result<(u64, u64), BenchError> {
        self.ctx.bind_to_thread().map_err(BenchError::driver)?;
        let (free, total) = cudarc::driver::result::mem_get_info().map_err(BenchError::driver)?;
        Ok((free as u64, total as u64))
    }

    /// Allocates `bytes` of device memory.
    pub fn alloc(&self, bytes: u64) -> Result<DevBuf, BenchError> {
        DevBuf::new(&self.ctx, bytes)
    }

    /// Uploads the `quant_1x128` tile table of `seg` for a matrix of `cols` columns; returns the
    /// device table and its tile count.
    pub(crate) fn upload_tiles(
        &self,
        seg: &crate::layout::Segments,
        cols: u64,
    ) -> Result<(DevBuf, u32), BenchError> {
        self.upload_tile_table(&seg.tiles(cols))
    }

    /// Uploads a tile table (7 u64 per tile); returns the device table and its tile count.
    pub(crate) fn upload_tile_table(
        &self,
        tiles: &[[u64; 7]],
    ) -> Result<(DevBuf, u32), BenchError> {
        let flat: Vec<u64> = tiles.iter().flatten().copied().collect();
        let b = self.alloc(8 * flat.len() as u64)?;
        b.write_at(&self.stream, 0, &flat)?;
        Ok((b, tiles.len() as u32))
    }

    /// Waits for all queued work.
    pub fn sync(&self) -> Result<(), BenchError> {
        self.stream.synchronize().map_err(BenchError::driver)
    }

    /// Fills the first `n` bf16 values of `buf` with N(0, stddev^2) noise from `seed`.
    pub fn fill_normal(
        &self,
        buf: &DevBuf,
        n: u64,
        seed: u32,
        stddev: f32,
    ) -> Result<(), BenchError> {
        if n == 0 {
            return Ok(());
        }
        buf.check_range(0, n.saturating_mul(2), "fill")?;
        let ptr = buf.ptr();
        let blocks = n.div_ceil(256).min(65_535 * 4) as u32;
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(&self.k.fill_normal);
        b.arg(&ptr).arg(&n).arg(&seed).arg(&stddev);
        // SAFETY: `buf` holds at least n bf16 values (checked above); the kernel writes only
        // indices below n.
        unsafe { b.launch(cfg) }.map_err(BenchError::driver)?;
        Ok(())
    }

    /// Queues a one-thread kernel that busy-waits `ns` nanoseconds (see `spin_ns`).
    pub(crate) fn spin(&self, ns: u64) -> Result<(), BenchError> {
        launch_spin(&self.stream, &self.k.spin, ns)
    }

    /// Counts NaN/Inf among the first `n` bf16 values of `buf` (synchronizes).
    pub fn count_nonfinite(
        &self,
        buf: &DevBuf,
        n: u64,
        scratch: &DevBuf,
    ) -> Result<u32, BenchError> {
        buf.check_range(0, n.saturating_mul(2), "count")?;
        scratch.check_range(0, 4, "count into")?;
        let ptr = buf.ptr();
        scratch.zero(&self.stream)?;
        if n > 0 {
            let blocks = n.div_ceil(256).min(65_535 * 4) as u32;
            let cfg = LaunchConfig {
                grid_dim: (blocks, 1, 1),
                block_dim: (256, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut b = self.stream.launch_builder(&self.k.count_nonfinite);
            let out = scratch.ptr();
            b.arg(&ptr).arg(&n).arg(&out);
            // SAFETY: reads n bf16 inside `buf` and adds into 4 bytes of `scratch` (both checked
            // above); the kernel reads only indices below n.
            unsafe { b.launch(cfg) }.map_err(BenchError::driver)?;
        }
        let mut c = [0u32; 1];
        scratch.read_into(&self.stream, &mut c)?;
        Ok(c[0])
    }
}

/// Queues `spin_ns` (one thread, busy-waits `ns` nanoseconds) on `stream`; `spin` is the kernel.
/// Timed work queued behind it is enqueued before the GPU reaches it, so events time the GPU.
pub(crate) fn launch_spin(
    stream: &CudaStream,
    spin: &CudaFunction,
    ns: u64,
) -> Result<(), BenchError> {
    let cfg = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (1, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut b = stream.launch_builder(spin);
    b.arg(&ns);
    // SAFETY: the kernel takes one u64 and touches no memory.
    unsafe { b.launch(cfg) }.map_err(BenchError::driver)?;
    Ok(())
}
