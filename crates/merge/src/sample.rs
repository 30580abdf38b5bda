//! What a loaded report is, whatever its format: samples keyed by rule, the report's origin and
//! its shard. Its own module: both readers (`load`, ours; `reference`, the reference tool's
//! list) produce it and the merge consumes it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use fp8_policy::ModuleKind;
use fp8_report::{PointId, Stat};

use crate::error::MergeError;

/// The parallel part of a rule key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ParKey {
    /// Dense kinds: tensor-parallel size.
    Tp(u32),
    /// Grouped kinds: (etp, num_gemms).
    Grouped(u32, u32),
}

/// A rule key with its component: what one policy rule is for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupKey {
    /// `llm` or `vit`: never pooled.
    pub component: String,
    /// Module kind.
    pub kind: ModuleKind,
    /// TE buffer name (dense kinds; `None` for grouped kinds).
    pub ub_name: Option<String>,
    /// Parallel key.
    pub par: ParKey,
}

/// One BF16/FP8 pair at one logical token count.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The rule it informs.
    pub key: GroupKey,
    /// The curve inside the key: module name and expert split. Modules sharing a key (a dense
    /// fc2 and a shared-expert fc2 at the same TP) are separate curves, and a rule must hold for
    /// all of them.
    pub curve: String,
    /// Logical token count.
    pub tokens: u64,
    /// BF16 step time.
    pub bf16: Stat,
    /// FP8 step time.
    pub fp8: Stat,
    /// Kernel launches per step (BF16, FP8), when known.
    pub launches: Option<(u32, u32)>,
    /// True when the stats have a real spread (p10/p90 measured).
    pub has_spread: bool,
    /// GPU busy time (BF16, FP8) beside eager `bf16`/`fp8` times, when the report has both
    /// (the TE backend).
    pub gpu: Option<(Stat, Stat)>,
    /// Instances of the module per rank (the report's `instances`), when known.
    pub instances: Option<u64>,
    /// The rank's GEMM shape, when the report says (the reference's list format does not).
    pub shape: Option<fp8_policy::GemmShape>,
}

/// What a report says about where it came from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Origin {
    /// Device name.
    pub device: String,
    /// Recipe.
    pub recipe: String,
    /// Cost-model estimate.
    pub estimated: bool,
    /// Model name (several joined by `+`).
    pub model: String,
    /// The models per component (`llm`, `vit`); a component with two is a mixed report.
    pub models: BTreeMap<String, BTreeSet<String>>,
    /// Whether the forward was recomputed in the backward; `None` when the report does not say
    /// (the reference tool's list format).
    pub recompute: Option<bool>,
    /// Whether TP communication was in the times (`adaptive_fp8.bench.te_tp`); `None` when the report
    /// does not say (the reference tool's list format).
    pub tp_comm: Option<bool>,
    /// The TP sizes above 1 of its points (only those differ with and without communication).
    pub tps: BTreeSet<u32>,
    /// What `total_ms` is: `gpu` (GPU time: the cuda backend), `model` (estimated GPU time),
    /// `te-eager` (an eager step, host included; GPU time beside it), `reference-eager` (the
    /// reference tool's synchronized eager iterations).
    pub timing: String,
}

/// A partial report of a sharded sweep (one rank of a torchrun/Slurm launch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardInfo {
    /// This report's rank.
    pub rank: usize,
    /// Number of ranks.
    pub world: usize,
    /// Identifies the sweep the shards belong to.
    pub digest: String,
    /// Points the rank was assigned that its report does not contain.
    pub absent: Vec<PointId>,
}

/// A loaded report.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The file.
    pub file: PathBuf,
    /// Provenance.
    pub origin: Origin,
    /// Usable samples.
    pub samples: Vec<Sample>,
    /// Points that could not be paired (reference format), in words.
    pub unpaired: Vec<String>,
    /// Points skipped or failed in the sweep, in words.
    pub not_ok: Vec<String>,
    /// Set when the report is one shard of a sharded sweep.
    pub shard: Option<ShardInfo>,
}

pub(crate) fn check_stat(
    s: &Stat,
    file: &Path,
    index: usize,
    what: &str,
    which: &str,
) -> Result<(), MergeError> {
    fp8_report::check_stat(s, which).map_err(|problem| MergeError::Point {
        file: file.into(),
        index,
        what: what.to_owned(),
        problem,
    })
}

/// Groups samples by key, sorted, for the merge.
pub fn by_key(samples: &[Sample]) -> BTreeMap<GroupKey, Vec<&Sample>> {
    let mut m: BTreeMap<GroupKey, Vec<&Sample>> = BTreeMap::new();
    for s in samples {
        m.entry(s.key.clone()).or_default().push(s);
    }
    m
}

/// One rule that was written, or a key that got none.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleOutcome {
    /// The key.
    pub key: GroupKey,
    /// `Some(min_tokens, measured_speedup)` when FP8 wins from some count up.
    pub rule: Option<(u64, f64)>,
    /// Measured token counts of the key.
    pub counts: Vec<u64>,
    /// The speedup each count was judged by, one per `counts` entry (`merge::speeds_of`).
    pub speeds: Vec<f64>,
}

/// The policy lookup key of a group, when it can carry a rule.
pub fn rule_key(k: &GroupKey) -> Option<fp8_policy::RuleKey> {
    match (k.kind.family(), k.par, &k.ub_name) {
        (fp8_policy::KindFamily::Dense(kind), ParKey::Tp(tp), Some(ub)) => {
            Some(fp8_policy::RuleKey::Dense {
                kind,
                ub_name: ub.clone(),
                tp,
            })
        }
        (fp8_policy::KindFamily::Grouped(kind), ParKey::Grouped(etp, num_gemms), _) => {
            Some(fp8_policy::RuleKey::Grouped {
                kind,
                etp,
                num_gemms,
            })
        }
        _ => None,
    }
}
