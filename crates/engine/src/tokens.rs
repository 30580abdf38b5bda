//! Token math: the count a module's decision compares against `min_tokens`.
//!
//! Dense modules: `fp8_dynamic_num_tokens` when it is > 0, else
//! `seq_length * micro_batch_size / context_parallel_size`. Experts: that times
//! `moe_router_topk`.
//!
//! Context parallelism splits the sequence across CP ranks, so each rank's GEMMs see `1/cp` of
//! the tokens. The reference ignored CP and so over-counted tokens by `cp`, enabling FP8 on
//! GEMMs that were in fact small. We divide.

use std::fmt;

/// Inputs of the token math for one model component.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct TokenConfig {
    /// Training sequence length.
    pub seq_length: u64,
    /// Micro-batch size.
    pub micro_batch_size: u64,
    /// Context-parallel size (1 when CP is off).
    pub context_parallel_size: u64,
    /// Explicit override; used as is when > 0 (CP is not applied to it: it is already the
    /// count the user wants compared).
    pub fp8_dynamic_num_tokens: Option<u64>,
}

/// How a token count was obtained, for explanations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenSource {
    /// From `fp8_dynamic_num_tokens`.
    Override(u64),
    /// `seq_length * micro_batch_size / cp`.
    Derived {
        /// Sequence length.
        seq_length: u64,
        /// Micro-batch size.
        micro_batch_size: u64,
        /// Context-parallel size.
        cp: u64,
    },
}

impl fmt::Display for TokenSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            TokenSource::Override(t) => write!(f, "fp8_dynamic_num_tokens={t}"),
            TokenSource::Derived {
                seq_length,
                micro_batch_size,
                cp: 1,
            } => write!(f, "seq {seq_length} x mbs {micro_batch_size}"),
            TokenSource::Derived {
                seq_length,
                micro_batch_size,
                cp,
            } => write!(f, "seq {seq_length} x mbs {micro_batch_size} / cp {cp}"),
        }
    }
}

impl TokenConfig {
    /// Plain `seq_length x micro_batch_size`, no CP, no override.
    pub const fn new(seq_length: u64, micro_batch_size: u64) -> Self {
        TokenConfig {
            seq_length,
            micro_batch_size,
            context_parallel_size: 1,
            fp8_dynamic_num_tokens: None,
        }
    }

    /// Tokens a dense module's decision compares, and where they came from. An error when
    /// `seq_length x micro_batch_size` does not fit in 64 bits: no real run has that many, and a
    /// saturated count would silently compare as "huge" and enable FP8.
    pub fn dense_tokens(&self) -> Result<(u64, TokenSource), TokenOverflow> {
        match self.fp8_dynamic_num_tokens {
            Some(t) if t > 0 => Ok((t, TokenSource::Override(t))),
            _ => {
                let cp = self.context_parallel_size.max(1);
                let n =
                    self.seq_length
                        .checked_mul(self.micro_batch_size)
                        .ok_or(TokenOverflow {
                            what: "seq_length x micro_batch_size",
                        })?;
                Ok((
                    n / cp,
                    TokenSource::Derived {
                        seq_length: self.seq_length,
                        micro_batch_size: self.micro_batch_size,
                        cp,
                    },
                ))
            }
        }
    }

    /// Tokens an expert module's decision compares: dense tokens x `topk`.
    pub fn expert_tokens(&self, topk: u64) -> Result<u64, TokenOverflow> {
        self.dense_tokens()?
            .0
            .checked_mul(topk)
            .ok_or(TokenOverflow {
                what: "tokens x moe_router_topk",
            })
    }
}

/// A token count too large for 64 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "{what} does not fit in 64 bits; fix: check the sequence length, micro-batch size and router top-k (or the config's values)"
)]
pub struct TokenOverflow {
    what: &'static str,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dense(t: &TokenConfig) -> (u64, TokenSource) {
        t.dense_tokens().expect("fits")
    }

    #[test]
    fn dense_is_seq_times_mbs() {
        assert_eq!(dense(&TokenConfig::new(4096, 2)).0, 8192);
    }

    #[test]
    fn cp_divides() {
        let t = TokenConfig {
            context_parallel_size: 4,
            ..TokenConfig::new(32768, 1)
        };
        let (n, src) = dense(&t);
        assert_eq!(n, 8192);
        assert_eq!(src.to_string(), "seq 32768 x mbs 1 / cp 4");
    }

    #[test]
    fn override_wins_and_zero_means_unset() {
        let t = TokenConfig {
            fp8_dynamic_num_tokens: Some(3000),
            context_parallel_size: 2,
            ..TokenConfig::new(4096, 1)
        };
        assert_eq!(dense(&t), (3000, TokenSource::Override(3000)));
        let t = TokenConfig {
            fp8_dynamic_num_tokens: Some(0),
            ..TokenConfig::new(4096, 1)
        };
        assert_eq!(dense(&t).0, 4096);
    }

    #[test]
    fn experts_multiply_by_topk() {
        assert_eq!(TokenConfig::new(4096, 1).expert_tokens(8), Ok(32768));
        let cp = TokenConfig {
            context_parallel_size: 2,
            ..TokenConfig::new(4096, 1)
        };
        assert_eq!(cp.expert_tokens(8), Ok(16384));
    }

    #[test]
    fn overflow_is_an_error_not_a_huge_count() {
        let t = TokenConfig::new(u64::MAX, 2);
        assert!(t.dense_tokens().is_err());
        assert!(t.expert_tokens(8).is_err());
        let t = TokenConfig::new(1 << 40, 1 << 20);
        assert_eq!(dense(&t).0, 1 << 60);
        assert!(t.expert_tokens(32).is_err());
        assert!(
            t.expert_tokens(32)
                .unwrap_err()
                .to_string()
                .contains("moe_router_topk")
        );
    }
}
