//! Step time of a model's module set under a precision assignment, from measured (or estimated)
//! points: the sum over every TE module and layer of its fwd+bwd time at the chosen precision.

use std::collections::BTreeMap;

use fp8_engine::{ModelDesc, Parallel, Role, TokenConfig, decide, inventory};
use fp8_policy::Policy;
use fp8_report::{Point, Status};

/// Step times of one model at one layout and token count.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepTimes {
    /// All modules BF16 (ms).
    pub bf16: f64,
    /// All modules FP8 where FP8 can run (ms).
    pub fp8: f64,
    /// The policy's choice per module (ms).
    pub adaptive: f64,
    /// The faster measured precision per module (ms).
    pub oracle: f64,
    /// Module instances (groups x layers).
    pub modules: u64,
    /// Module instances the policy runs FP8.
    pub fp8_modules: u64,
    /// Modules with no measurement at this count (not counted).
    pub missing: Vec<String>,
    /// Modules whose choice cost time against the oracle: (ms lost over all layers, module,
    /// decision tokens, the policy's reason).
    pub losses: Vec<(f64, String, u64, String)>,
}

/// (component, module, tokens) -> [(BF16 ms, FP8 ms when FP8 ran)].
type Measured = BTreeMap<(String, String, u64), Vec<(f64, Option<f64>)>>;

/// Looks points up by (component, module, tokens); grouped modules average their split modes.
pub struct PointIndex(Measured);

impl PointIndex {
    /// Indexes the ok points (BF16 always; FP8 when it ran).
    pub fn new<'a>(points: impl IntoIterator<Item = &'a Point>) -> Self {
        let mut m = Measured::new();
        for p in points {
            let Some(b) = p.bf16 else { continue };
            let fp8 = (p.status == Status::Ok)
                .then_some(p.fp8)
                .flatten()
                .map(|t| t.total_ms.median);
            if p.status == Status::Failed {
                continue;
            }
            m.entry((p.component.clone(), p.module.clone(), p.tokens))
                .or_default()
                .push((b.total_ms.median, fp8));
        }
        PointIndex(m)
    }

    fn get(&self, component: Role, module: &str, tokens: u64) -> Option<(f64, Option<f64>)> {
        let v = self
            .0
            .get(&(component.to_string(), module.to_owned(), tokens))?;
        let n = v.len() as f64;
        let b = v.iter().map(|x| x.0).sum::<f64>() / n;
        let f = v
            .iter()
            .map(|x| x.1)
            .collect::<Option<Vec<f64>>>()
            .map(|f| f.iter().sum::<f64>() / n);
        Some((b, f))
    }
}

/// Evaluates `model` at `parallel` with the same dense token count `tokens` for every component.
pub fn step_times(
    model: &ModelDesc,
    parallel: Parallel,
    tokens: u64,
    policies: &BTreeMap<Role, Policy>,
    index: &PointIndex,
    roles: &[Role],
) -> StepTimes {
    let mut out = StepTimes::default();
    for c in model.components.iter().filter(|c| roles.contains(&c.role)) {
        let Ok(modules) = inventory(c, parallel) else {
            continue;
        };
        let topk = c.arch.moe.map_or(1, |m| m.router_topk);
        let tc = TokenConfig::new(tokens, 1);
        for spec in &modules {
            // The module times are GPU times: the graphed step's, so its thresholds apply.
            let graphed = fp8_policy::Execution::Graphed;
            let Ok(d) = decide(spec, &tc, topk, policies.get(&c.role), graphed) else {
                out.missing
                    .push(format!("{} {}: token count overflows", c.role, spec.name));
                continue;
            };
            let Some((b, f)) = index.get(c.role, &spec.name, d.num_tokens) else {
                out.missing
                    .push(format!("{} {} @ {}", c.role, spec.name, d.num_tokens));
                continue;
            };
            let layers = spec.layers as f64;
            // Where FP8 cannot run (shape not a multiple of 16), "all FP8" means BF16 there too.
            let f = f.unwrap_or(b);
            let fp8_on = d.use_fp8();
            out.bf16 += layers * b;
            out.fp8 += layers * f;
            out.adaptive += layers * if fp8_on { f } else { b };
            out.oracle += layers * b.min(f);
            let chosen = if fp8_on { f } else { b };
            if chosen > b.min(f) {
                out.losses.push((
                    layers * (chosen - b.min(f)),
                    spec.name.clone(),
                    d.num_tokens,
                    d.reason(),
                ));
            }
            out.modules += spec.layers;
            out.fp8_modules += if fp8_on { spec.layers } else { 0 };
        }
    }
    out.losses.sort_by(|a, b| b.0.total_cmp(&a.0));
    out
}
