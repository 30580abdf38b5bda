//! The lookup key of one rule (`(kind, ub_name, tp)` or `(kind, etp, num_gemms)`), its display
//! form for messages and its JSON form for provenance. Its own module: the policy's rules and
//! the provenance's key lists both take it.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::kind::{DenseKind, GroupedKind, ModuleKind};

/// The lookup key of one rule, used in messages and duplicate detection.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RuleKey {
    /// A dense rule's key.
    Dense {
        /// Module kind.
        kind: DenseKind,
        /// TE tp-comm buffer name.
        ub_name: String,
        /// Tensor-parallel size.
        tp: u32,
    },
    /// A grouped rule's key.
    Grouped {
        /// Module kind.
        kind: GroupedKind,
        /// Expert tensor-parallel size.
        etp: u32,
        /// Experts per rank.
        num_gemms: u32,
    },
}

impl fmt::Display for RuleKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RuleKey::Dense { kind, ub_name, tp } => {
                write!(f, "(kind={kind}, ub_name={ub_name}, tp={tp})")
            }
            RuleKey::Grouped {
                kind,
                etp,
                num_gemms,
            } => write!(f, "(kind={kind}, etp={etp}, num_gemms={num_gemms})"),
        }
    }
}

/// A rule key as JSON: `{"kind": "row", "ub_name": "fc2", "tp": 8}` or
/// `{"kind": "row_grouped", "etp": 1, "num_gemms": 32}`.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyJson {
    kind: ModuleKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ub_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tp: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    etp: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    num_gemms: Option<u32>,
}

impl Serialize for RuleKey {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let k = match self {
            RuleKey::Dense { kind, ub_name, tp } => KeyJson {
                kind: (*kind).into(),
                ub_name: Some(ub_name.clone()),
                tp: Some(*tp),
                etp: None,
                num_gemms: None,
            },
            RuleKey::Grouped {
                kind,
                etp,
                num_gemms,
            } => KeyJson {
                kind: (*kind).into(),
                ub_name: None,
                tp: None,
                etp: Some(*etp),
                num_gemms: Some(*num_gemms),
            },
        };
        k.serialize(s)
    }
}

impl<'de> Deserialize<'de> for RuleKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let k = KeyJson::deserialize(d)?;
        let nonzero = |v: Option<u32>, name: &str| match v {
            Some(0) => Err(D::Error::custom(format!("{name} must be at least 1"))),
            Some(v) => Ok(v),
            None => Err(D::Error::custom(format!("missing {name}"))),
        };
        match k.kind.family() {
            crate::KindFamily::Dense(kind) => Ok(RuleKey::Dense {
                kind,
                ub_name: k
                    .ub_name
                    .filter(|u| !u.is_empty())
                    .ok_or_else(|| D::Error::custom("missing ub_name"))?,
                tp: nonzero(k.tp, "tp")?,
            }),
            crate::KindFamily::Grouped(kind) => Ok(RuleKey::Grouped {
                kind,
                etp: nonzero(k.etp, "etp")?,
                num_gemms: nonzero(k.num_gemms, "num_gemms")?,
            }),
        }
    }
}

/// Reads keys written as objects, or as the display strings older versions wrote
/// (`(kind=row, ub_name=fc2, tp=8)`).
pub(crate) fn keys_any_form<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<RuleKey>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Any {
        Key(RuleKey),
        Text(String),
    }
    Vec::<Any>::deserialize(d)?
        .into_iter()
        .map(|a| match a {
            Any::Key(k) => Ok(k),
            Any::Text(t) => parse_display(&t)
                .ok_or_else(|| serde::de::Error::custom(format!("`{t}` is not a rule key"))),
        })
        .collect()
}

fn parse_display(t: &str) -> Option<RuleKey> {
    let inner = t.strip_prefix('(')?.strip_suffix(')')?;
    let mut fields = BTreeMap::new();
    for part in inner.split(", ") {
        let (k, v) = part.split_once('=')?;
        fields.insert(k, v);
    }
    let kind: ModuleKind = fields.get("kind")?.parse().ok()?;
    let num = |k: &str| fields.get(k)?.parse::<u32>().ok().filter(|v| *v > 0);
    match kind.family() {
        crate::KindFamily::Dense(kind) => Some(RuleKey::Dense {
            kind,
            ub_name: (*fields.get("ub_name")?).to_owned(),
            tp: num("tp")?,
        }),
        crate::KindFamily::Grouped(kind) => Some(RuleKey::Grouped {
            kind,
            etp: num("etp")?,
            num_gemms: num("num_gemms")?,
        }),
    }
}
