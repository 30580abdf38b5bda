//! The identity of a sweep point, across processes, re-runs and the merge.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What makes two measurements the same measurement: the module, its per-rank shape, the expert
/// split and the logical token count. Written as
/// `component/module/split/tokens/in x out x num_gemms`, e.g.
/// `llm/decoder.layers.mlp.experts/zipf1.2/32768/7168x4096x32`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PointId {
    /// `llm` or `vit`.
    pub component: String,
    /// Megatron module name.
    pub module: String,
    /// Expert split mode (`uniform`, `zipf1.2`); `None` for dense modules.
    pub split: Option<String>,
    /// Logical token count.
    pub tokens: u64,
    /// Input features of the rank's GEMM.
    pub in_features: u64,
    /// Output features of the rank's GEMM.
    pub out_features: u64,
    /// GEMMs per module.
    pub num_gemms: u32,
}

impl fmt::Display for PointId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}/{}/{}/{}x{}x{}",
            self.component,
            self.module,
            self.split.as_deref().unwrap_or(""),
            self.tokens,
            self.in_features,
            self.out_features,
            self.num_gemms
        )
    }
}

/// A string that is not a [`PointId`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}` is not a point id (component/module/split/tokens/INxOUTxGEMMS); fix: regenerate the report"
)]
pub struct BadPointId(String);

impl FromStr for PointId {
    type Err = BadPointId;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || BadPointId(s.to_owned());
        // Module names hold dots, never slashes; parse the fixed fields from the right.
        let mut right = s.rsplitn(4, '/');
        let shape = right.next().ok_or_else(bad)?;
        let tokens = right.next().ok_or_else(bad)?;
        let split = right.next().ok_or_else(bad)?;
        let (component, module) = right
            .next()
            .ok_or_else(bad)?
            .split_once('/')
            .ok_or_else(bad)?;
        let mut dims = shape.split('x');
        let mut dim = || {
            dims.next()
                .and_then(|d| d.parse::<u64>().ok())
                .ok_or_else(bad)
        };
        let (in_features, out_features, num_gemms) = (dim()?, dim()?, dim()?);
        if dims.next().is_some() || component.is_empty() || module.is_empty() {
            return Err(bad());
        }
        Ok(PointId {
            component: component.to_owned(),
            module: module.to_owned(),
            split: (!split.is_empty()).then(|| split.to_owned()),
            tokens: tokens.parse().map_err(|_| bad())?,
            in_features,
            out_features,
            num_gemms: u32::try_from(num_gemms).map_err(|_| bad())?,
        })
    }
}

impl Serialize for PointId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for PointId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A digest of a whole sweep (its point ids, order-independent), shared by every shard of one
/// sweep so the merge can tell shards of different sweeps apart.
pub fn sweep_digest<'a>(ids: impl IntoIterator<Item = &'a PointId>) -> String {
    let mut ids: Vec<String> = ids.into_iter().map(PointId::to_string).collect();
    ids.sort();
    // FNV-1a, 64 bit: stable across platforms and releases, unlike `DefaultHasher`.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for id in &ids {
        for b in id.bytes().chain(std::iter::once(0)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    format!("{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(split: Option<&str>) -> PointId {
        PointId {
            component: "llm".into(),
            module: "decoder.layers.mlp.experts.linear_fc1".into(),
            split: split.map(str::to_owned),
            tokens: 32768,
            in_features: 7168,
            out_features: 4096,
            num_gemms: 32,
        }
    }

    #[test]
    fn round_trips_through_text() {
        for p in [id(None), id(Some("zipf1.2"))] {
            let text = p.to_string();
            assert_eq!(text.parse::<PointId>(), Ok(p.clone()), "{text}");
            let json = serde_json::to_string(&p).expect("serializes");
            assert_eq!(serde_json::from_str::<PointId>(&json).ok(), Some(p));
        }
        assert_eq!(
            id(None).to_string(),
            "llm/decoder.layers.mlp.experts.linear_fc1//32768/7168x4096x32"
        );
    }

    #[test]
    fn rejects_malformed_ids() {
        for bad in [
            "",
            "llm",
            "llm/m/x/1",
            "llm/m//1/2x3",
            "llm/m//1/2x3x4x5",
            "llm/m//t/2x3x4",
            "/m//1/2x3x4",
            "llm/m//1/2x3x99999999999",
        ] {
            assert!(bad.parse::<PointId>().is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn digest_ignores_order() {
        let (a, b) = (id(None), id(Some("uniform")));
        assert_eq!(sweep_digest([&a, &b]), sweep_digest([&b, &a]));
        assert_ne!(sweep_digest([&a]), sweep_digest([&b]));
    }
}
