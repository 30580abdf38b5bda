//! The exhaustive algorithm search behind `AlgoSearch::Exhaustive`, and the timing and output
//! comparison both searches use.

use std::mem::MaybeUninit;

use cudarc::cublaslt::sys as lt;

use super::{Lt, Plan, Ptrs, WORKSPACE_BYTES, ck, types};
use crate::error::BenchError;

impl Lt {
    /// Times each candidate (None: refused at launch). Large GEMMs get one timed run per
    /// candidate, small ones several, so that launch jitter does not pick the winner.
    pub(super) fn time_candidates(
        &self,
        plan: &Plan,
        p: &Ptrs,
        algos: &[lt::cublasLtMatmulAlgo_t],
        always: bool,
    ) -> Result<Vec<Option<f32>>, BenchError> {
        if algos.len() == 1 && !always {
            return Ok(vec![Some(0.0)]);
        }
        let ctx = self.stream.context().clone();
        let ev = || {
            ctx.new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(BenchError::driver)
        };
        let (start, end) = (ev()?, ev()?);
        let mut reps: Option<u32> = None;
        let mut times = Vec::with_capacity(algos.len());
        for algo in algos {
            // An algorithm cuBLASLt offered or accepted can still refuse at launch; skip it.
            if self.launch(plan, p, algo).is_err() {
                times.push(None);
                continue;
            }
            let n = reps.unwrap_or(5);
            start.record(&self.stream).map_err(BenchError::driver)?;
            for _ in 0..n {
                self.launch(plan, p, algo)?;
            }
            end.record(&self.stream).map_err(BenchError::driver)?;
            let ms = start.elapsed_ms(&end).map_err(BenchError::driver)? / n as f32;
            // Aim at ~1 ms of timing per candidate, at most 5 runs.
            reps.get_or_insert(((1.0 / ms.max(1e-3)).ceil() as u32).clamp(1, 5));
            times.push(Some(ms));
        }
        Ok(times)
    }

    /// Every algorithm id and configuration cuBLASLt accepts for this plan (bounded), and how
    /// many configurations were checked. First every (tile, stages, custom option) of every id,
    /// the heuristic's ids first; then the cluster shapes and CTA swizzle on what was accepted.
    pub(super) fn enumerate(
        &self,
        plan: &Plan,
        seeds: &[lt::cublasLtMatmulAlgo_t],
    ) -> Result<(Vec<lt::cublasLtMatmulAlgo_t>, usize), BenchError> {
        let mut en = Enumeration {
            lt: self,
            plan,
            seeds,
            out: Vec::new(),
            checked: 0,
        };
        let ids = en.algo_ids()?;
        en.sweep_ids(&ids);
        en.sweep_seed_tiles();
        en.sweep_clusters();
        Ok((en.out, en.checked))
    }

    /// Relative Frobenius difference between the outputs of two algorithms on the same inputs.
    pub(super) fn output_diff(
        &self,
        plan: &Plan,
        p: &Ptrs,
        a: &lt::cublasLtMatmulAlgo_t,
        b: &lt::cublasLtMatmulAlgo_t,
    ) -> Result<f64, BenchError> {
        let n = (plan.shape.m * plan.shape.n) as usize;
        let read = |algo: &lt::cublasLtMatmulAlgo_t| -> Result<Vec<u16>, BenchError> {
            self.launch(plan, p, algo)?;
            self.stream.synchronize().map_err(BenchError::driver)?;
            let mut v = vec![0u16; n];
            // SAFETY: D holds m x n bf16 values; the stream is idle.
            unsafe { cudarc::driver::result::memcpy_dtoh_sync(&mut v, p.d) }
                .map_err(BenchError::driver)?;
            Ok(v)
        };
        let (x, y) = (read(a)?, read(b)?);
        let f = |u: u16| f64::from(f32::from_bits(u32::from(u) << 16));
        let (mut num, mut den) = (0.0f64, 0.0f64);
        for (u, v) in x.iter().zip(&y) {
            let (u, v) = (f(*u), f(*v));
            num += (u - v) * (u - v);
            den += u * u;
        }
        Ok(if den > 0.0 {
            (num / den).sqrt()
        } else {
            f64::INFINITY
        })
    }
}

use lt::cublasLtMatmulAlgoCapAttributes_t as Cap;
use lt::cublasLtMatmulAlgoConfigAttributes_t as Cfg;

/// Configurations checked at most, and accepted at most, per plan.
const MAX_CHECKS: usize = 400_000;
const MAX_VALID: usize = 400;

/// One plan's search in progress: what was accepted and how many configurations were checked.
struct Enumeration<'a> {
    lt: &'a Lt,
    plan: &'a Plan,
    seeds: &'a [lt::cublasLtMatmulAlgo_t],
    out: Vec<lt::cublasLtMatmulAlgo_t>,
    checked: usize,
}

/// The data and compute types cuBLASLt's algorithm queries take, in their argument order.
struct AlgoTypes {
    compute: lt::cublasComputeType_t,
    f32t: lt::cudaDataType,
    ty: lt::cudaDataType,
    tyb: lt::cudaDataType,
    bf16: lt::cudaDataType,
}

impl Enumeration<'_> {
    /// The plan's types: A's and B's, FP32 scale, BF16 C and D.
    fn types(&self) -> AlgoTypes {
        let (ty, compute) = types(self.plan.shape.dt);
        let (tyb, _) = types(self.plan.shape.dtb);
        AlgoTypes {
            compute,
            f32t: lt::cudaDataType::CUDA_R_32F,
            ty,
            tyb,
            bf16: lt::cudaDataType::CUDA_R_16BF,
        }
    }

    /// Whether `share` (in quarters) of either budget is spent.
    fn spent(&self, quarters: usize) -> bool {
        self.checked >= MAX_CHECKS * quarters / 4 || self.out.len() >= MAX_VALID * quarters / 4
    }

    /// The algorithm ids of the plan's types, the heuristic's own ids first.
    fn algo_ids(&self) -> Result<Vec<i32>, BenchError> {
        let AlgoTypes {
            compute,
            f32t,
            ty,
            tyb,
            bf16,
        } = self.types();
        let mut ids = vec![0i32; 1024];
        let mut n_ids = 0;
        // SAFETY: `ids` has room for 1024 entries.
        unsafe {
            ck(
                lt::cublasLtMatmulAlgoGetIds(
                    self.lt.handle,
                    compute,
                    f32t,
                    ty,
                    tyb,
                    bf16,
                    bf16,
                    ids.len() as i32,
                    ids.as_mut_ptr(),
                    &mut n_ids,
                ),
                "cublasLtMatmulAlgoGetIds",
            )?;
        }
        ids.truncate(n_ids.clamp(0, 1024) as usize);
        let seed_ids: Vec<i32> = self
            .seeds
            .iter()
            .map(|a| config(a, Cfg::CUBLASLT_ALGO_CONFIG_ID) as i32)
            .collect();
        ids.sort_by_key(|id| !seed_ids.contains(id));
        Ok(ids)
    }

    /// Keeps `a` when cuBLASLt accepts it for the plan within the workspace and it is new.
    fn check(&mut self, a: &lt::cublasLtMatmulAlgo_t) {
        self.checked += 1;
        let plan = self.plan;
        let mut r = MaybeUninit::<lt::cublasLtMatmulHeuristicResult_t>::uninit();
        // SAFETY: live descriptors; `r` is an out-parameter.
        let st = unsafe {
            lt::cublasLtMatmulAlgoCheck(
                self.lt.handle,
                plan.desc,
                plan.a,
                plan.b,
                plan.d,
                plan.d,
                a,
                r.as_mut_ptr(),
            )
        };
        if st == lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
            // SAFETY: written by the successful check.
            let r = unsafe { r.assume_init() };
            if r.workspaceSize <= WORKSPACE_BYTES as usize
                && !self.out.contains(a)
                && !self.seeds.contains(a)
            {
                self.out.push(*a);
            }
        }
    }

    /// The initialised algorithm `id` of the plan's types, or None when cuBLASLt refuses it.
    fn init(&self, id: i32) -> Option<lt::cublasLtMatmulAlgo_t> {
        let AlgoTypes {
            compute,
            f32t,
            ty,
            tyb,
            bf16,
        } = self.types();
        let mut algo = MaybeUninit::<lt::cublasLtMatmulAlgo_t>::uninit();
        // SAFETY: out-parameter initialisation; read only when it succeeds.
        let ok = unsafe {
            lt::cublasLtMatmulAlgoInit(
                self.lt.handle,
                compute,
                f32t,
                ty,
                tyb,
                bf16,
                bf16,
                id,
                algo.as_mut_ptr(),
            )
        };
        // SAFETY: initialised by the successful call above.
        (ok == lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS).then(|| unsafe { algo.assume_init() })
    }

    /// Every (tile, stages, custom option) of every id, within three quarters of the budgets.
    fn sweep_ids(&mut self, ids: &[i32]) {
        let debug = std::env::var_os("FP8SEL_DEBUG_AUTOTUNE").is_some();
        for &id in ids {
            let Some(base) = self.init(id) else { continue };
            let or_zero = |v: Vec<u32>| if v.is_empty() { vec![0] } else { v };
            let tiles = or_zero(cap_list(&base, Cap::CUBLASLT_ALGO_CAP_TILE_IDS));
            let stages = or_zero(cap_list(&base, Cap::CUBLASLT_ALGO_CAP_STAGES_IDS));
            let customs = cap_u32(&base, Cap::CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX).min(63);
            let before = self.out.len();
            for &tile in &tiles {
                for &stage in &stages {
                    for custom in 0..=customs {
                        if self.spent(3) {
                            return;
                        }
                        let mut a = base;
                        if set_config(&mut a, Cfg::CUBLASLT_ALGO_CONFIG_TILE_ID, tile)
                            && set_config(&mut a, Cfg::CUBLASLT_ALGO_CONFIG_STAGES_ID, stage)
                            && set_config(&mut a, Cfg::CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, custom)
                        {
                            self.check(&a);
                        }
                    }
                }
            }
            if debug {
                eprintln!(
                    "  algo id {id}: {} tiles, {} stages, custom options 0..={customs}: {} accepted",
                    tiles.len(),
                    stages.len(),
                    self.out.len() - before
                );
            }
        }
    }

    /// Every tile and custom option with the stages the heuristic chose: block-scaled FP8
    /// advertises stage ids its own choice does not use, so [`Self::sweep_ids`] can find nothing.
    fn sweep_seed_tiles(&mut self) {
        for seed in self.seeds {
            let tiles = cap_list(seed, Cap::CUBLASLT_ALGO_CAP_TILE_IDS);
            let customs = cap_u32(seed, Cap::CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX).min(63);
            for &tile in &tiles {
                for custom in 0..=customs {
                    if self.spent(4) {
                        return;
                    }
                    let mut a = *seed;
                    if set_config(&mut a, Cfg::CUBLASLT_ALGO_CONFIG_TILE_ID, tile)
                        && set_config(&mut a, Cfg::CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, custom)
                    {
                        self.check(&a);
                    }
                }
            }
        }
    }

    /// Cluster shapes (1x1x1, 2x1x1, 1x2x1, 2x2x1) and the CTA swizzle, around what was
    /// accepted and the heuristic's own choices.
    fn sweep_clusters(&mut self) {
        let around: Vec<lt::cublasLtMatmulAlgo_t> =
            self.seeds.iter().chain(self.out.iter()).copied().collect();
        for a0 in around {
            for cluster in [2u32, 3, 5, 6] {
                for swizzle in [0u32, 1] {
                    if self.spent(4) {
                        return;
                    }
                    let mut a = a0;
                    if set_config(&mut a, Cfg::CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, cluster)
                        && set_config(&mut a, Cfg::CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, swizzle)
                    {
                        self.check(&a);
                    }
                }
            }
        }
    }
}

/// Sets one 4-byte configuration attribute; false when cuBLASLt refuses the value.
fn set_config(a: &mut lt::cublasLtMatmulAlgo_t, attr: Cfg, v: u32) -> bool {
    // SAFETY: 4-byte attribute values.
    let st =
        unsafe { lt::cublasLtMatmulAlgoConfigSetAttribute(a, attr, (&v as *const u32).cast(), 4) };
    st == lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS
}

/// A u32 array capability (tile or stage ids); empty when the algorithm has none.
fn cap_list(
    algo: &lt::cublasLtMatmulAlgo_t,
    cap: lt::cublasLtMatmulAlgoCapAttributes_t,
) -> Vec<u32> {
    let mut size = 0usize;
    // SAFETY: a size query (null buffer, zero bytes).
    let st = unsafe {
        lt::cublasLtMatmulAlgoCapGetAttribute(algo, cap, std::ptr::null_mut(), 0, &mut size)
    };
    if st != lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS || size == 0 {
        return Vec::new();
    }
    let mut v = vec![0u32; size.div_ceil(4)];
    let mut written = 0usize;
    // SAFETY: `v` holds at least `size` bytes.
    let st = unsafe {
        lt::cublasLtMatmulAlgoCapGetAttribute(
            algo,
            cap,
            v.as_mut_ptr().cast(),
            4 * v.len(),
            &mut written,
        )
    };
    if st != lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        return Vec::new();
    }
    v.truncate(written / 4);
    v
}

/// A scalar u32 capability (0 when the query fails).
fn cap_u32(algo: &lt::cublasLtMatmulAlgo_t, cap: lt::cublasLtMatmulAlgoCapAttributes_t) -> u32 {
    let mut v = 0u32;
    let mut written = 0usize;
    // SAFETY: 4-byte buffer.
    let st = unsafe {
        lt::cublasLtMatmulAlgoCapGetAttribute(
            algo,
            cap,
            (&mut v as *mut u32).cast(),
            4,
            &mut written,
        )
    };
    if st == lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        v
    } else {
        0
    }
}

/// `algo A tile T stages S swizzle W cluster C custom O` of a configured algorithm.
pub(super) fn describe(algo: &lt::cublasLtMatmulAlgo_t) -> String {
    use lt::cublasLtMatmulAlgoConfigAttributes_t as Cfg;
    format!(
        "algo {} tile {} stages {} swizzle {} cluster {} custom {}",
        config(algo, Cfg::CUBLASLT_ALGO_CONFIG_ID),
        config(algo, Cfg::CUBLASLT_ALGO_CONFIG_TILE_ID),
        config(algo, Cfg::CUBLASLT_ALGO_CONFIG_STAGES_ID),
        config(algo, Cfg::CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
        config(algo, Cfg::CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID),
        config(algo, Cfg::CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION),
    )
}

/// One 4-byte configuration attribute of an algorithm (0 when the query fails).
fn config(algo: &lt::cublasLtMatmulAlgo_t, attr: lt::cublasLtMatmulAlgoConfigAttributes_t) -> u32 {
    let mut v = 0u32;
    let mut w = 0usize;
    // SAFETY: 4-byte buffer; every attribute read here is 4 bytes.
    let st = unsafe {
        lt::cublasLtMatmulAlgoConfigGetAttribute(algo, attr, (&mut v as *mut u32).cast(), 4, &mut w)
    };
    if st == lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        v
    } else {
        0
    }
}
