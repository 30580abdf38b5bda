//! Module kinds: the six TE linear flavours a policy distinguishes.

use std::fmt;
use std::str::FromStr;

/// A Transformer Engine linear module flavour, as named in the policy file.
///
/// The four dense kinds key their rules by `(ub_name, tp)`; the two grouped (MoE expert) kinds
/// key theirs by `(etp, num_gemms)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum ModuleKind {
    /// `TELayerNormColumnParallelLinear`: QKV / FC1 with the norm fused in.
    LayernormColumn,
    /// `TEColumnParallelLinear`.
    Column,
    /// `TERowParallelLinear`: attention output projection / FC2.
    Row,
    /// `TELinear` with no tensor-parallel split (MLA down projections).
    Duplicated,
    /// `TEColumnParallelGroupedLinear`: MoE expert FC1.
    ColumnGrouped,
    /// `TERowParallelGroupedLinear`: MoE expert FC2.
    RowGrouped,
}

/// A dense module kind: rules nest under `ub_name` and are keyed by `tp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum DenseKind {
    /// See [`ModuleKind::LayernormColumn`].
    LayernormColumn,
    /// See [`ModuleKind::Column`].
    Column,
    /// See [`ModuleKind::Row`].
    Row,
    /// See [`ModuleKind::Duplicated`].
    Duplicated,
}

/// A grouped (MoE expert) module kind: a flat rule list keyed by `(etp, num_gemms)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum GroupedKind {
    /// See [`ModuleKind::ColumnGrouped`].
    ColumnGrouped,
    /// See [`ModuleKind::RowGrouped`].
    RowGrouped,
}

/// A module kind split into its dense or grouped family.
///
/// Deliberately exhaustive, like [`Lookup`](crate::Lookup) and [`RuleKey`](crate::RuleKey):
/// format version 1 has exactly these two rule layouts, and a third would be a new format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KindFamily {
    /// Rules keyed by `(ub_name, tp)`.
    Dense(DenseKind),
    /// Rules keyed by `(etp, num_gemms)`.
    Grouped(GroupedKind),
}

impl ModuleKind {
    /// All kinds, in the canonical order used when writing a policy.
    pub const ALL: [ModuleKind; 6] = [
        ModuleKind::LayernormColumn,
        ModuleKind::Column,
        ModuleKind::Row,
        ModuleKind::Duplicated,
        ModuleKind::ColumnGrouped,
        ModuleKind::RowGrouped,
    ];

    /// The name used in policy files and reports (`layernorm_column`, `row_grouped`, ...).
    pub const fn as_str(self) -> &'static str {
        match self {
            ModuleKind::LayernormColumn => "layernorm_column",
            ModuleKind::Column => "column",
            ModuleKind::Row => "row",
            ModuleKind::Duplicated => "duplicated",
            ModuleKind::ColumnGrouped => "column_grouped",
            ModuleKind::RowGrouped => "row_grouped",
        }
    }

    /// Whether this is an MoE grouped kind.
    pub const fn is_grouped(self) -> bool {
        matches!(self, ModuleKind::ColumnGrouped | ModuleKind::RowGrouped)
    }

    /// Splits the kind into its dense or grouped family.
    pub const fn family(self) -> KindFamily {
        match self {
            ModuleKind::LayernormColumn => KindFamily::Dense(DenseKind::LayernormColumn),
            ModuleKind::Column => KindFamily::Dense(DenseKind::Column),
            ModuleKind::Row => KindFamily::Dense(DenseKind::Row),
            ModuleKind::Duplicated => KindFamily::Dense(DenseKind::Duplicated),
            ModuleKind::ColumnGrouped => KindFamily::Grouped(GroupedKind::ColumnGrouped),
            ModuleKind::RowGrouped => KindFamily::Grouped(GroupedKind::RowGrouped),
        }
    }

    /// Whether the module splits its output features across TP ranks (column flavours) rather
    /// than its input features (row flavours). `duplicated` splits neither.
    pub const fn is_column(self) -> bool {
        matches!(
            self,
            ModuleKind::LayernormColumn | ModuleKind::Column | ModuleKind::ColumnGrouped
        )
    }
}

impl DenseKind {
    /// All dense kinds in canonical order.
    pub const ALL: [DenseKind; 4] = [
        DenseKind::LayernormColumn,
        DenseKind::Column,
        DenseKind::Row,
        DenseKind::Duplicated,
    ];

    pub(crate) const fn index(self) -> usize {
        self as usize
    }
}

impl GroupedKind {
    /// All grouped kinds in canonical order.
    pub const ALL: [GroupedKind; 2] = [GroupedKind::ColumnGrouped, GroupedKind::RowGrouped];

    pub(crate) const fn index(self) -> usize {
        self as usize
    }
}

impl From<DenseKind> for ModuleKind {
    fn from(k: DenseKind) -> Self {
        match k {
            DenseKind::LayernormColumn => ModuleKind::LayernormColumn,
            DenseKind::Column => ModuleKind::Column,
            DenseKind::Row => ModuleKind::Row,
            DenseKind::Duplicated => ModuleKind::Duplicated,
        }
    }
}

impl From<GroupedKind> for ModuleKind {
    fn from(k: GroupedKind) -> Self {
        match k {
            GroupedKind::ColumnGrouped => ModuleKind::ColumnGrouped,
            GroupedKind::RowGrouped => ModuleKind::RowGrouped,
        }
    }
}

impl fmt::Display for ModuleKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for DenseKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        ModuleKind::from(*self).fmt(f)
    }
}

impl fmt::Display for GroupedKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        ModuleKind::from(*self).fmt(f)
    }
}

/// The error for a string that names no module kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown module kind `{0}`; expected one of layernorm_column, column, row, duplicated, \
     column_grouped, row_grouped"
)]
pub struct UnknownKind(pub String);

impl FromStr for ModuleKind {
    type Err = UnknownKind;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ModuleKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| UnknownKind(s.to_owned()))
    }
}

impl serde::Serialize for ModuleKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for ModuleKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_families_agree() {
        for k in ModuleKind::ALL {
            assert_eq!(k.as_str().parse::<ModuleKind>(), Ok(k));
            match k.family() {
                KindFamily::Dense(d) => assert_eq!(ModuleKind::from(d), k),
                KindFamily::Grouped(g) => assert_eq!(ModuleKind::from(g), k),
            }
            assert_eq!(k.is_grouped(), matches!(k.family(), KindFamily::Grouped(_)));
        }
        assert!("linear".parse::<ModuleKind>().is_err());
    }
}
