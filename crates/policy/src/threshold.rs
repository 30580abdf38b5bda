//! Where FP8 starts for a key in one execution ([`Threshold`]), and the one number files carry
//! for "never" ([`NEVER`]).

use std::fmt;

/// The threshold no token count reaches: the rule keeps its key BF16 in that execution. Files
/// carry it as the number 2^53 (the reference's loader reads `min_tokens` as a number); human
/// output says "never" ([`threshold_words`]).
pub const NEVER: u64 = 1 << 53;

/// A threshold in words: the count, or "never" for [`NEVER`] and above.
pub fn threshold_words(t: u64) -> String {
    Threshold::from_wire(t).to_string()
}

/// Where FP8 starts for a key in one execution: from a token count, or never. Files carry
/// `Never` as the number [`NEVER`] (the reference's loader reads `min_tokens` as a number);
/// nothing else needs to know that number. Ordered: every count before `Never`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Threshold {
    /// FP8 from this many tokens up.
    From(u64),
    /// BF16 at every count.
    Never,
}

impl Threshold {
    /// The threshold a file's number means: [`NEVER`] and above is `Never`.
    pub const fn from_wire(n: u64) -> Threshold {
        if n >= NEVER {
            Threshold::Never
        } else {
            Threshold::From(n)
        }
    }

    /// The number a file carries for it.
    pub const fn to_wire(self) -> u64 {
        match self {
            Threshold::From(n) => n,
            Threshold::Never => NEVER,
        }
    }

    /// Whether `tokens` runs FP8 under it.
    pub const fn allows(self, tokens: u64) -> bool {
        match self {
            Threshold::From(n) => tokens >= n,
            Threshold::Never => false,
        }
    }
}

impl fmt::Display for Threshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Threshold::From(n) => write!(f, "{n}"),
            Threshold::Never => f.write_str("never"),
        }
    }
}
