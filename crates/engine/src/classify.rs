//! TE class -> module kind, with the `ub_name` fallback and MoE expert promotion.
//!
//! Classification looks at the module's own class name once. The reference ran its callback from
//! every `__init__` in the class hierarchy, so `TERowParallelLinear` (a `TELinear` subclass) was
//! classified a second time as `duplicated`, found no rule, and lost FP8. Nothing here walks a
//! class hierarchy, so that cannot happen.

use std::fmt;
use std::str::FromStr;

use fp8_policy::ModuleKind;

/// The six Transformer Engine linear classes Megatron builds (seed section 3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TeClass {
    /// Column-parallel linear with the preceding norm fused in (QKV, FC1).
    LayerNormColumnParallelLinear,
    /// Column-parallel linear.
    ColumnParallelLinear,
    /// Row-parallel linear (attention proj, FC2).
    RowParallelLinear,
    /// Grouped column-parallel linear (MoE expert FC1).
    ColumnParallelGroupedLinear,
    /// Grouped row-parallel linear (MoE expert FC2).
    RowParallelGroupedLinear,
    /// Plain `TELinear`, not split by TP (MLA down projections).
    Linear,
}

impl TeClass {
    /// All classes.
    pub const ALL: [TeClass; 6] = [
        TeClass::LayerNormColumnParallelLinear,
        TeClass::ColumnParallelLinear,
        TeClass::RowParallelLinear,
        TeClass::ColumnParallelGroupedLinear,
        TeClass::RowParallelGroupedLinear,
        TeClass::Linear,
    ];

    /// The Python class name.
    pub const fn as_str(self) -> &'static str {
        match self {
            TeClass::LayerNormColumnParallelLinear => "TELayerNormColumnParallelLinear",
            TeClass::ColumnParallelLinear => "TEColumnParallelLinear",
            TeClass::RowParallelLinear => "TERowParallelLinear",
            TeClass::ColumnParallelGroupedLinear => "TEColumnParallelGroupedLinear",
            TeClass::RowParallelGroupedLinear => "TERowParallelGroupedLinear",
            TeClass::Linear => "TELinear",
        }
    }

    /// The module kind of the seed's table.
    pub const fn kind(self) -> ModuleKind {
        match self {
            TeClass::LayerNormColumnParallelLinear => ModuleKind::LayernormColumn,
            TeClass::ColumnParallelLinear => ModuleKind::Column,
            TeClass::RowParallelLinear => ModuleKind::Row,
            TeClass::ColumnParallelGroupedLinear => ModuleKind::ColumnGrouped,
            TeClass::RowParallelGroupedLinear => ModuleKind::RowGrouped,
            TeClass::Linear => ModuleKind::Duplicated,
        }
    }
}

impl fmt::Display for TeClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A class name that is not one of the six.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown TE class `{0}`; expected one of TELayerNormColumnParallelLinear, \
     TEColumnParallelLinear, TERowParallelLinear, TEColumnParallelGroupedLinear, \
     TERowParallelGroupedLinear, TELinear"
)]
pub struct UnknownTeClass(pub String);

impl FromStr for TeClass {
    type Err = UnknownTeClass;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TeClass::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| UnknownTeClass(s.to_owned()))
    }
}

impl serde::Serialize for TeClass {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// The kind the seed's fallback table gives a module of unknown class, by its `ub_name`.
pub fn kind_from_ub_name(ub_name: &str) -> Option<ModuleKind> {
    match ub_name {
        "qkv" | "fc1" => Some(ModuleKind::LayernormColumn),
        "proj" | "fc2" => Some(ModuleKind::Row),
        "q_down_proj" | "kv_down_proj" => Some(ModuleKind::Duplicated),
        _ => None,
    }
}

/// Promotes an expert module's kind (seed section 3.3): column flavours become
/// `column_grouped`, `row` becomes `row_grouped`. Other kinds are unchanged.
pub const fn promote_expert(kind: ModuleKind) -> ModuleKind {
    match kind {
        ModuleKind::LayernormColumn | ModuleKind::Column => ModuleKind::ColumnGrouped,
        ModuleKind::Row => ModuleKind::RowGrouped,
        other => other,
    }
}

/// How a module's kind was found, for explanations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KindSource {
    /// From its TE class.
    Class(TeClass),
    /// From the `ub_name` fallback table (class unknown).
    UbNameFallback,
    /// Given directly.
    Given,
}

/// The result of classifying one module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Classified {
    /// The kind the policy is looked up with (after any promotion).
    pub kind: ModuleKind,
    /// The kind before promotion.
    pub base_kind: ModuleKind,
    /// True when expert promotion changed the kind.
    pub promoted: bool,
    /// Where the base kind came from.
    pub source: KindSource,
}

/// Why a module could not be classified.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClassifyError {
    /// Unknown class and no `ub_name` the fallback table knows.
    #[error(
        "cannot classify module: class `{class}` is not a TE linear class and ub_name {ub} is not \
         in the fallback table (qkv, fc1, proj, fc2, q_down_proj, kv_down_proj)"
    )]
    Unclassifiable {
        /// The class name given.
        class: String,
        /// The ub_name given, quoted, or `(none)`.
        ub: String,
    },
}

/// Classifies one module, once: by class name, else by `ub_name`; then promotes experts.
pub fn classify(
    te_class: &str,
    ub_name: Option<&str>,
    is_expert: bool,
) -> Result<Classified, ClassifyError> {
    let (base_kind, source) = match te_class.parse::<TeClass>() {
        Ok(c) => (c.kind(), KindSource::Class(c)),
        Err(_) => match ub_name.and_then(kind_from_ub_name) {
            Some(k) => (k, KindSource::UbNameFallback),
            None => {
                return Err(ClassifyError::Unclassifiable {
                    class: te_class.to_owned(),
                    ub: ub_name.map_or_else(|| "(none)".to_owned(), |u| format!("`{u}`")),
                });
            }
        },
    };
    Ok(with_promotion(base_kind, source, is_expert))
}

/// Applies expert promotion to an already-known kind.
pub fn with_promotion(base_kind: ModuleKind, source: KindSource, is_expert: bool) -> Classified {
    let kind = if is_expert {
        promote_expert(base_kind)
    } else {
        base_kind
    };
    Classified {
        kind,
        base_kind,
        promoted: kind != base_kind,
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_table() {
        let expect = [
            (
                "TELayerNormColumnParallelLinear",
                ModuleKind::LayernormColumn,
            ),
            ("TEColumnParallelLinear", ModuleKind::Column),
            ("TERowParallelLinear", ModuleKind::Row),
            ("TEColumnParallelGroupedLinear", ModuleKind::ColumnGrouped),
            ("TERowParallelGroupedLinear", ModuleKind::RowGrouped),
            ("TELinear", ModuleKind::Duplicated),
        ];
        for (class, kind) in expect {
            let c = classify(class, Some("anything"), false).unwrap();
            assert_eq!(c.kind, kind, "{class}");
            assert!(!c.promoted);
        }
    }

    #[test]
    fn row_and_column_are_never_reclassified_as_duplicated() {
        // The reference classified TERowParallelLinear twice (its TELinear base re-ran the
        // callback) and the second answer, `duplicated`, won. One call, one answer here.
        for class in ["TERowParallelLinear", "TEColumnParallelLinear"] {
            let c = classify(class, Some("fc2"), false).unwrap();
            assert_ne!(c.kind, ModuleKind::Duplicated);
            assert_eq!(c.source, KindSource::Class(class.parse().unwrap()));
        }
    }

    #[test]
    fn ub_name_fallback() {
        for (ub, kind) in [
            ("qkv", ModuleKind::LayernormColumn),
            ("fc1", ModuleKind::LayernormColumn),
            ("proj", ModuleKind::Row),
            ("fc2", ModuleKind::Row),
            ("q_down_proj", ModuleKind::Duplicated),
            ("kv_down_proj", ModuleKind::Duplicated),
        ] {
            let c = classify("MyCustomLinear", Some(ub), false).unwrap();
            assert_eq!((c.kind, c.source), (kind, KindSource::UbNameFallback));
        }
        assert!(classify("MyCustomLinear", Some("q_up_proj"), false).is_err());
        let e = classify("MyCustomLinear", None, false).unwrap_err();
        assert!(e.to_string().contains("(none)"), "{e}");
    }

    #[test]
    fn expert_promotion() {
        let c = classify("TELayerNormColumnParallelLinear", Some("fc1"), true).unwrap();
        assert_eq!(
            (c.kind, c.base_kind, c.promoted),
            (ModuleKind::ColumnGrouped, ModuleKind::LayernormColumn, true)
        );
        let c = classify("TEColumnParallelLinear", Some("fc1"), true).unwrap();
        assert_eq!(c.kind, ModuleKind::ColumnGrouped);
        let c = classify("TERowParallelLinear", Some("fc2"), true).unwrap();
        assert_eq!(c.kind, ModuleKind::RowGrouped);
        let c = classify("TEColumnParallelGroupedLinear", None, true).unwrap();
        assert_eq!((c.kind, c.promoted), (ModuleKind::ColumnGrouped, false));
        let c = classify("TELinear", Some("q_down_proj"), true).unwrap();
        assert_eq!((c.kind, c.promoted), (ModuleKind::Duplicated, false));
        // Fallback then promotion.
        let c = classify("Custom", Some("fc2"), true).unwrap();
        assert_eq!(c.kind, ModuleKind::RowGrouped);
    }
}
