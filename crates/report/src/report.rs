//! The benchmark report: what `fp8sel bench` writes and `fp8sel merge-policy` reads.
//!
//! One report is one sweep on one device under one parallel layout. A point is one module at one
//! token count, keyed by its logical (unpadded) token count: the count the trainer's decision
//! compares. Padded FP8 row counts are recorded beside it, never used as the key.

use std::collections::BTreeMap;

use fp8_policy::ModuleKind;
use serde::{Deserialize, Serialize};

use crate::point_id::PointId;

/// Value of the `format` field that marks our reports.
pub const REPORT_FORMAT: &str = "fp8sel-report";
/// Current report version.
pub const REPORT_VERSION: u32 = 1;

/// A whole report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Always [`REPORT_FORMAT`].
    pub format: String,
    /// Always [`REPORT_VERSION`] for this layout.
    pub report_version: u32,
    /// True when the numbers come from the cost model, not the GPU.
    #[serde(default)]
    pub estimated: bool,
    /// Where and how the numbers were taken.
    pub provenance: Provenance,
    /// The measurements.
    pub points: Vec<Point>,
}

/// Where and how a report was made.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    /// `fp8sel` version.
    pub tool_version: String,
    /// The device (or the cost model's device profile).
    pub device: DeviceInfo,
    /// FP8 recipe (`blockwise`).
    pub recipe: String,
    /// Scale rounding: `pow2` (TE's default) or `fp32`.
    pub scale_mode: String,
    /// Whether weights were kept as FP8 params (no per-step weight cast).
    pub fp8_param: bool,
    /// Pad multiple applied to FP8 token counts and expert splits.
    pub fp8_pad: u32,
    /// Warmup iterations.
    pub warmup: u32,
    /// Timed iterations.
    pub iters: u32,
    /// What was timed: `gpu` (CUDA events around device work) or `model`.
    pub timing: String,
    /// Model name.
    pub model: String,
    /// Model config path as given.
    pub model_config: String,
    /// Parallel layout.
    pub parallel: ParallelInfo,
    /// Expert token split used for grouped modules (`uniform` or `zipf1.2`).
    #[serde(default)]
    pub expert_split: String,
    /// Devices of a multi-GPU sweep (`--devices`); empty for one device.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<usize>,
    /// Set when the report is one rank's share of a sharded sweep (torchrun/Slurm).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<Shard>,
    /// The Transformer Engine version, for reports measured through TE (`--backend te`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub te_version: Option<String>,
    /// The forward ran again inside the backward (activation recompute), as the reference tool
    /// times by default. Reports with and without it do not merge.
    #[serde(default)]
    pub recompute: bool,
    /// Timed as TE tensor-parallel modules over a real TP group with sequence parallelism, so
    /// the all-gathers and reduce-scatters are in the times (`adaptive_fp8.bench.te_tp` under
    /// torchrun). Reports with and without it do not merge.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tp_comm: bool,
    /// Points copied from an earlier layout's measurement of the same per-rank shape on the same
    /// device in the same run (`fp8sel gen-policy` measures each distinct shape once).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reused_points: Vec<PointId>,
}

/// One rank's share of a sweep launched by torchrun or Slurm.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Shard {
    /// This report's rank.
    pub rank: usize,
    /// Number of ranks.
    pub world_size: usize,
    /// `torchrun` or `slurm`.
    pub launcher: String,
    /// Identifies the sweep all the shards belong to ([`crate::sweep_digest`]).
    pub sweep_digest: String,
    /// Points in the whole sweep.
    pub sweep_points: usize,
    /// The points this rank was assigned.
    pub point_ids: Vec<PointId>,
}

/// Device facts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// Device name (`NVIDIA H200`), or `model:<profile>` for estimates.
    pub name: String,
    /// Compute capability, e.g. `9.0`.
    pub compute_capability: String,
    /// Driver version.
    #[serde(default)]
    pub driver: String,
    /// cuBLASLt version.
    #[serde(default)]
    pub cublaslt: String,
    /// NVRTC version.
    #[serde(default)]
    pub nvrtc: String,
    /// Streaming multiprocessors.
    #[serde(default)]
    pub sm_count: u32,
}

/// The parallel layout of a report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParallelInfo {
    /// Tensor-parallel size.
    pub tp: u32,
    /// Expert-parallel size.
    pub ep: u32,
    /// Expert tensor-parallel size.
    pub etp: u32,
    /// Context-parallel size.
    pub cp: u32,
}

/// Median and spread of a timing, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Stat {
    /// Median.
    pub median: f64,
    /// 10th percentile.
    pub p10: f64,
    /// 90th percentile.
    pub p90: f64,
}

impl Stat {
    /// The stat of a sample (median, p10, p90 by nearest rank). `None` when empty.
    pub fn of(samples: &[f64]) -> Option<Stat> {
        if samples.is_empty() {
            return None;
        }
        let mut s = samples.to_vec();
        s.sort_by(f64::total_cmp);
        let at = |q: f64| s[((q * (s.len() - 1) as f64).round() as usize).min(s.len() - 1)];
        Some(Stat {
            median: at(0.5),
            p10: at(0.1),
            p90: at(0.9),
        })
    }

    /// A stat with no spread.
    pub const fn exact(v: f64) -> Stat {
        Stat {
            median: v,
            p10: v,
            p90: v,
        }
    }
}

/// One precision's measurement of a point.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    /// Forward time.
    pub fwd_ms: Stat,
    /// Backward time.
    pub bwd_ms: Stat,
    /// Forward + backward per step.
    pub total_ms: Stat,
    /// Time in FP8 casts (quantization kernels) per step; 0 for BF16.
    #[serde(default)]
    pub cast_ms: Stat,
    /// Kernel launches per step (a host-bound trainer pays per launch).
    pub launches: u32,
    /// GPU busy time per step (kernels of every stream merged as wall-clock intervals), when
    /// `total_ms` is an eager time that includes the host (the TE backend).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_total_ms: Option<Stat>,
}

/// Outcome of a point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Checked and timed.
    Ok,
    /// A correctness check failed; not timed.
    Failed,
    /// Not run (does not fit, unsupported shape, ...).
    Skipped,
}

/// One module at one token count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// `llm` or `vit`.
    pub component: String,
    /// Megatron module name.
    pub module: String,
    /// TE class.
    pub te_class: String,
    /// Kind used for the policy lookup.
    pub module_kind: ModuleKind,
    /// TE tp-comm buffer name.
    pub ub_name: Option<String>,
    /// Tensor-parallel size.
    pub tp: u32,
    /// Expert tensor-parallel size.
    pub etp: u32,
    /// GEMMs per module (local experts for grouped kinds).
    pub num_gemms: u32,
    /// Logical token count: what the trainer's decision compares (x topk for experts).
    pub tokens: u64,
    /// Rows of the rank's GEMM before padding (all experts together).
    pub gemm_rows: u64,
    /// Rows after FP8 padding (all experts together).
    pub padded_rows: u64,
    /// Per-expert rows (logical), for grouped kinds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub splits: Vec<u64>,
    /// How expert rows were split (`uniform`, `zipf1.2`), for grouped kinds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split_mode: Option<String>,
    /// How many instances of this module one rank builds (layers that have it, from the
    /// engine's inventory): the weight of its time when several modules share a rule key.
    /// Absent in reports written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instances: Option<u64>,
    /// Input features of the rank's GEMM.
    pub in_features: u64,
    /// Output features of the rank's GEMM.
    pub out_features: u64,
    /// Checked and timed, failed, or skipped.
    pub status: Status,
    /// Why a point failed or was skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// BF16 timing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bf16: Option<Timing>,
    /// FP8 timing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp8: Option<Timing>,
    /// BF16 total median / FP8 total median.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speedup: Option<f64>,
    /// Relative Frobenius errors of the correctness checks, by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub errors: BTreeMap<String, f64>,
}

impl Point {
    /// The point's identity: the same for the point the sweep planned and the point it wrote.
    pub fn id(&self) -> PointId {
        PointId {
            component: self.component.clone(),
            module: self.module.clone(),
            split: self.split_mode.clone(),
            tokens: self.tokens,
            in_features: self.in_features,
            out_features: self.out_features,
            num_gemms: self.num_gemms,
        }
    }

    /// The point in words, for messages: `llm decoder.layers.mlp.linear_fc1 at 4096 tokens`.
    pub fn describe(&self) -> String {
        let split = self
            .split_mode
            .as_deref()
            .map(|s| format!(" [{s}]"))
            .unwrap_or_default();
        format!(
            "{} {}{split} at {} tokens",
            self.component, self.module, self.tokens
        )
    }
}

impl Report {
    /// An empty report with the given provenance.
    pub fn new(provenance: Provenance, estimated: bool) -> Self {
        Report {
            format: REPORT_FORMAT.to_owned(),
            report_version: REPORT_VERSION,
            estimated,
            provenance,
            points: Vec::new(),
        }
    }

    /// Pretty JSON with a trailing newline.
    pub fn to_json(&self) -> String {
        // Serializing plain structs of numbers and strings cannot fail; a map with non-string
        // keys would, and there is none.
        let mut s = serde_json::to_string_pretty(self)
            .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
        s.push('\n');
        s
    }

    /// Counts of ok / failed / skipped points.
    pub fn status_counts(&self) -> (usize, usize, usize) {
        let c = |s: Status| self.points.iter().filter(|p| p.status == s).count();
        (c(Status::Ok), c(Status::Failed), c(Status::Skipped))
    }
}
