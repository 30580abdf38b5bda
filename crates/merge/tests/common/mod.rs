//! What the merge's test files share: the repository root and samples built by hand. (Each test
//! binary uses some of it.)

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::PathBuf;

use fp8_merge::{GroupKey, Loaded, ParKey, Sample};
use fp8_policy::ModuleKind;
use fp8_report::Stat;

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

pub fn key(kind: ModuleKind, ub: Option<&str>, par: ParKey) -> GroupKey {
    GroupKey {
        component: "llm".into(),
        kind,
        ub_name: ub.map(str::to_owned),
        par,
    }
}

pub fn sample(k: &GroupKey, curve: &str, tokens: u64, bf16: f64, fp8: f64) -> Sample {
    Sample {
        key: k.clone(),
        curve: curve.into(),
        tokens,
        bf16: Stat::exact(bf16),
        fp8: Stat::exact(fp8),
        launches: None,
        has_spread: false,
        gpu: None,
        instances: None,
        shape: None,
    }
}

pub fn weighted(
    k: &GroupKey,
    curve: &str,
    instances: u64,
    tokens: u64,
    bf16: f64,
    fp8: f64,
) -> Sample {
    Sample {
        instances: Some(instances),
        ..sample(k, curve, tokens, bf16, fp8)
    }
}

pub fn loaded(samples: Vec<Sample>, device: &str) -> Loaded {
    Loaded {
        file: PathBuf::from(format!("{device}.json")),
        origin: fp8_merge::Origin {
            device: device.into(),
            recipe: "blockwise".into(),
            estimated: false,
            model: "m".into(),
            models: [("llm".to_owned(), ["m".to_owned()].into())].into(),
            recompute: Some(false),
            tp_comm: Some(false),
            tps: BTreeSet::new(),
            timing: "gpu".into(),
        },
        samples,
        unpaired: vec![],
        not_ok: vec![],
        shard: None,
    }
}

pub fn fc2() -> GroupKey {
    key(ModuleKind::Row, Some("fc2"), ParKey::Tp(1))
}
