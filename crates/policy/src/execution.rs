//! How the trainer runs its step: eager, or captured in CUDA graphs. A rule may carry a
//! threshold for each (`min_tokens` for eager, `min_tokens_graphed` for graphed): in an eager
//! step the host launches every kernel and FP8's extra casts cost host time as well as GPU
//! time, so FP8 pays from larger token counts than under CUDA graphs.

use std::fmt;
use std::str::FromStr;

/// The trainer's execution.
///
/// ```
/// use fp8_policy::Execution;
///
/// assert_eq!("graphed".parse::<Execution>()?, Execution::Graphed);
/// assert_eq!(Execution::default(), Execution::Eager);
/// # Ok::<(), String>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Execution {
    /// Each kernel launched from the host (Megatron's `cuda_graph_impl: none`, its default).
    #[default]
    Eager,
    /// The step (or its layers) captured in CUDA graphs and replayed.
    Graphed,
}

impl Execution {
    /// `eager` or `graphed`.
    pub const fn name(self) -> &'static str {
        match self {
            Execution::Eager => "eager",
            Execution::Graphed => "graphed",
        }
    }
}

impl fmt::Display for Execution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Execution {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "eager" => Ok(Execution::Eager),
            "graphed" => Ok(Execution::Graphed),
            _ => Err(format!(
                "unknown execution `{s}`: use eager (kernels launched one by one) or graphed (CUDA graphs)"
            )),
        }
    }
}

impl serde::Serialize for Execution {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> serde::Deserialize<'de> for Execution {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}
