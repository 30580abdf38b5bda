//! Deterministic serialization.
//!
//! Key order is fixed (`version`, `speedup_threshold`, `rules`, then extra keys sorted), kinds
//! come in canonical order, `ub_name`s sorted, rules sorted by their key. The same policy
//! therefore always gives the same bytes, which keeps `policies/` diffs reviewable.

use serde::ser::{SerializeMap, SerializeStruct};
use serde::{Serialize, Serializer};

use crate::kind::{DenseKind, GroupedKind};
use crate::policy::{DenseRule, GroupedRule, POLICY_VERSION, Policy};
use crate::threshold::Threshold;

impl Serialize for Policy {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let n = 3
            + self.extra.len()
            + usize::from(self.provenance.is_some())
            + usize::from(self.recipes.is_some());
        let mut m = s.serialize_map(Some(n))?;
        m.serialize_entry("version", &POLICY_VERSION)?;
        m.serialize_entry("speedup_threshold", &self.speedup_threshold)?;
        m.serialize_entry("rules", &RulesView(self))?;
        // Extra keys sorted, `provenance` and `recipes` in their sorted places among them.
        let recipes = self.recipes.as_ref().map(crate::RecipePlan::to_value);
        let mut ours: Vec<(&str, Ours<'_>)> = Vec::new();
        if let Some(p) = &self.provenance {
            ours.push(("provenance", Ours::Provenance(p)));
        }
        if let Some(r) = &recipes {
            ours.push(("recipes", Ours::Value(r)));
        }
        let mut ours = ours.into_iter().peekable();
        for (k, v) in &self.extra {
            while let Some((name, value)) = ours.next_if(|(name, _)| k.as_str() > *name) {
                m.serialize_entry(name, &value)?;
            }
            m.serialize_entry(k, v)?;
        }
        for (name, value) in ours {
            m.serialize_entry(name, &value)?;
        }
        m.end()
    }
}

/// A top-level value this crate owns.
enum Ours<'a> {
    Provenance(&'a crate::Provenance),
    Value(&'a serde_json::Value),
}

impl Serialize for Ours<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Ours::Provenance(p) => p.serialize(s),
            Ours::Value(v) => v.serialize(s),
        }
    }
}

struct RulesView<'a>(&'a Policy);

impl Serialize for RulesView<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let p = self.0;
        let mut m = s.serialize_map(None)?;
        for kind in DenseKind::ALL {
            let by_ub = p.dense_rules(kind);
            if !by_ub.is_empty() {
                m.serialize_entry(kind.to_string().as_str(), by_ub)?;
            }
        }
        for kind in GroupedKind::ALL {
            let rules = p.grouped_rules(kind);
            if !rules.is_empty() {
                m.serialize_entry(kind.to_string().as_str(), rules)?;
            }
        }
        m.end()
    }
}

/// The fields every rule kind ends with, in the wire's order: `min_tokens`, then the optional
/// `min_tokens_graphed` and `measured_speedup` (absent, not null, when unset).
struct Tail {
    min_tokens: Threshold,
    graphed: Option<Threshold>,
    speedup: Option<f64>,
}

impl Tail {
    /// How many of its fields are written: `min_tokens` and each optional one set.
    fn len(&self) -> usize {
        1 + usize::from(self.graphed.is_some()) + usize::from(self.speedup.is_some())
    }

    /// Writes its fields and ends the struct.
    fn end<S: SerializeStruct>(self, mut st: S) -> Result<S::Ok, S::Error> {
        st.serialize_field("min_tokens", &self.min_tokens.to_wire())?;
        if let Some(g) = self.graphed {
            st.serialize_field("min_tokens_graphed", &g.to_wire())?;
        }
        if let Some(x) = self.speedup {
            st.serialize_field("measured_speedup", &x)?;
        }
        st.end()
    }
}

impl Serialize for DenseRule {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let tail = Tail {
            min_tokens: self.min_tokens,
            graphed: self.min_tokens_graphed,
            speedup: self.measured_speedup,
        };
        let mut st = s.serialize_struct("DenseRule", 1 + tail.len())?;
        st.serialize_field("tp", &self.tp)?;
        tail.end(st)
    }
}

impl Serialize for GroupedRule {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let tail = Tail {
            min_tokens: self.min_tokens,
            graphed: self.min_tokens_graphed,
            speedup: self.measured_speedup,
        };
        let mut st = s.serialize_struct("GroupedRule", 2 + tail.len())?;
        st.serialize_field("etp", &self.etp)?;
        st.serialize_field("num_gemms", &self.num_gemms)?;
        tail.end(st)
    }
}

impl Policy {
    /// The policy as pretty JSON (two-space indent) with a trailing newline.
    pub fn to_json(&self) -> String {
        // Cannot fail: every float in a Policy is finite (checked on insert) and every map key
        // is a string.
        let mut out = serde_json::to_string_pretty(self).unwrap_or_else(|e| {
            unreachable!("policy serialization is infallible: {e}");
        });
        out.push('\n');
        out
    }
}
