//! One module's answer from what a caller knows of it (its TE class or kind, `ub_name`, the
//! layout and the tokens): assembled here once, for `fp8sel decide` and the Python
//! `Policy.decide` alike.

use fp8_policy::{Decision, Execution, ModuleKind, Policy, RuleKey};

use crate::classify::{Classified, ClassifyError, KindSource, classify, with_promotion};
use crate::plan::{DecideError, ModuleQuery, decide_module};
use crate::tokens::TokenConfig;

/// How the caller names the module.
#[derive(Debug, Clone, Copy)]
pub enum ModuleName<'a> {
    /// Its TE class (`TERowParallelLinear`, ...), classified with its `ub_name`.
    Class(&'a str),
    /// Its module kind, given.
    Kind(ModuleKind),
}

/// Everything one module's decision takes.
#[derive(Debug, Clone)]
pub struct OneModule<'a> {
    /// The module.
    pub name: ModuleName<'a>,
    /// Its TE tp-comm buffer name.
    pub ub_name: Option<&'a str>,
    /// A routed expert (a dense class is promoted to its grouped kind).
    pub expert: bool,
    /// Tensor-parallel size.
    pub tp: u32,
    /// Expert tensor-parallel size (default: `tp`, as Megatron).
    pub etp: Option<u32>,
    /// Experts per rank (grouped kinds).
    pub num_gemms: Option<u32>,
    /// Experts per token (grouped kinds scale the tokens by it).
    pub topk: Option<u64>,
    /// Sequence length, micro-batch, context parallelism or the override.
    pub tokens: TokenConfig,
    /// The trainer's execution (picks `min_tokens` or `min_tokens_graphed`).
    pub execution: Execution,
}

/// The answer.
#[derive(Debug, Clone)]
pub struct OneDecision {
    /// The module's kind and how it was found.
    pub classified: Classified,
    /// The tokens compared.
    pub num_tokens: u64,
    /// The policy's answer.
    pub decision: Decision,
    /// The rule key looked up (none for a dense module without `ub_name`).
    pub key: Option<RuleKey>,
}

/// Why no decision could be made, in the engine's terms (a caller maps them to its flags).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OneError {
    /// The TE class is unknown, or a class and `ub_name` that cannot go together.
    #[error(transparent)]
    Classify(#[from] ClassifyError),
    /// Neither a sequence length nor a token count.
    #[error(
        "no token count: give the sequence length (with micro-batch size and CP) or the token count"
    )]
    NoTokens,
    /// A size that must be at least 1 is 0.
    #[error("{0} is 0; tp, etp, cp, num_gemms and the micro-batch size start at 1")]
    Zero(&'static str),
    /// An expert kind without its `num_gemms` or `topk`, or tokens that overflow.
    #[error(transparent)]
    Decide(#[from] DecideError),
}

/// Decides one module under `policy`.
pub fn decide_one(m: &OneModule<'_>, policy: &Policy) -> Result<OneDecision, OneError> {
    let classified = match m.name {
        ModuleName::Class(class) => classify(class, m.ub_name, m.expert)?,
        ModuleName::Kind(kind) => with_promotion(kind, KindSource::Given, m.expert),
    };
    if m.tokens.fp8_dynamic_num_tokens.is_none() && m.tokens.seq_length == 0 {
        return Err(OneError::NoTokens);
    }
    for (name, v) in [
        ("tp", Some(u64::from(m.tp))),
        ("etp", m.etp.map(u64::from)),
        ("cp", Some(m.tokens.context_parallel_size)),
        ("num_gemms", m.num_gemms.map(u64::from)),
        ("micro_batch_size", Some(m.tokens.micro_batch_size)),
    ] {
        if v == Some(0) {
            return Err(OneError::Zero(name));
        }
    }
    let query = ModuleQuery {
        kind: classified.kind,
        ub_name: m.ub_name,
        tp: m.tp,
        etp: m.etp.unwrap_or(m.tp),
        num_gemms: m.num_gemms,
        execution: m.execution,
    };
    let decided = decide_module(&query, &m.tokens, m.topk, Some(policy))?;
    let decision = decided
        .decision
        .unwrap_or_else(|| unreachable!("decide_module answers whenever a policy is given"));
    Ok(OneDecision {
        key: query.lookup().and_then(|l| l.key()),
        classified,
        num_tokens: decided.num_tokens,
        decision,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Policy {
        Policy::from_json_str(
            r#"{"version": 1, "speedup_threshold": 1.0, "rules": {
                "row": {"fc2": [{"tp": 1, "min_tokens": 4096, "min_tokens_graphed": 1024}]},
                "column_grouped": [{"etp": 1, "num_gemms": 8, "min_tokens": 8192}]}}"#,
            "p.json",
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn module(name: ModuleName<'static>) -> OneModule<'static> {
        OneModule {
            name,
            ub_name: Some("fc2"),
            expert: false,
            tp: 1,
            etp: None,
            num_gemms: None,
            topk: None,
            tokens: TokenConfig {
                seq_length: 2048,
                micro_batch_size: 1,
                context_parallel_size: 1,
                fp8_dynamic_num_tokens: None,
            },
            execution: Execution::Eager,
        }
    }

    #[test]
    fn a_class_or_a_kind_gets_the_rule_of_its_execution() {
        let p = policy();
        let eager = decide_one(&module(ModuleName::Class("TERowParallelLinear")), &p)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(!eager.decision.use_fp8 && eager.num_tokens == 2048);
        assert!(eager.key.is_some());
        let mut m = module(ModuleName::Kind(ModuleKind::Row));
        m.execution = Execution::Graphed;
        assert!(
            decide_one(&m, &p)
                .unwrap_or_else(|e| panic!("{e}"))
                .decision
                .use_fp8
        );
    }

    #[test]
    fn an_expert_is_promoted_and_needs_its_counts() {
        let p = policy();
        let mut m = module(ModuleName::Class("TEColumnParallelLinear"));
        m.ub_name = Some("fc1");
        m.expert = true;
        assert!(matches!(
            decide_one(&m, &p),
            Err(OneError::Decide(DecideError::NoNumGemms(_)))
        ));
        m.num_gemms = Some(8);
        m.topk = Some(4);
        let d = decide_one(&m, &p).unwrap_or_else(|e| panic!("{e}"));
        assert!(d.classified.promoted && d.decision.use_fp8 && d.num_tokens == 8192);
    }

    #[test]
    fn missing_tokens_and_zero_sizes_are_named() {
        let p = policy();
        let mut m = module(ModuleName::Class("TERowParallelLinear"));
        m.tokens.seq_length = 0;
        assert!(matches!(decide_one(&m, &p), Err(OneError::NoTokens)));
        let mut m = module(ModuleName::Class("TERowParallelLinear"));
        m.etp = Some(0);
        let e = decide_one(&m, &p)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.starts_with("etp is 0"), "{e}");
        // An unknown class falls back to its ub_name; with none it cannot be classified.
        let mut m = module(ModuleName::Class("TENoSuchLinear"));
        assert!(decide_one(&m, &p).is_ok());
        m.ub_name = None;
        assert!(matches!(decide_one(&m, &p), Err(OneError::Classify(_))));
    }
}
