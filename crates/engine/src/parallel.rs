//! The parallel layout a rank runs under (TP, EP, ETP, CP, sequence parallelism): its own module
//! because both the model (a config's layout) and the inventory (per-rank shapes) take it.

use std::fmt;

use serde::Serialize;

/// The parallel layout a rank runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Parallel {
    /// Tensor-parallel size.
    pub tp: u32,
    /// Expert-parallel size.
    pub ep: u32,
    /// Expert tensor-parallel size.
    pub etp: u32,
    /// Context-parallel size.
    pub cp: u32,
    /// Sequence parallelism (Megatron requires it for MoE with TP > 1; on by default).
    pub sequence_parallel: bool,
}

impl Parallel {
    /// A layout as Megatron runs it by default: sequence parallelism on whenever TP > 1 (it is
    /// required for MoE with TP > 1, and what every launcher of the seed's models sets). This is
    /// the one place that rule lives.
    pub const fn new(tp: u32, ep: u32, etp: u32, cp: u32) -> Self {
        Parallel {
            tp,
            ep,
            etp,
            cp,
            sequence_parallel: tp > 1,
        }
    }

    /// TP only; EP = ETP = CP = 1.
    pub const fn tp(tp: u32) -> Self {
        Parallel::new(tp, 1, 1, 1)
    }

    /// The step in which a micro-batch's token count can move so that every rank's FP8 GEMMs
    /// stay aligned: TE's FP8 asks for rows in multiples of 16, and each rank holds the
    /// sequence split `tp` ways under sequence parallelism and `2 cp` ways under context
    /// parallelism (Megatron's load-balanced split). A count off this step fails in FP8 (TE:
    /// "Caller must pad").
    pub const fn token_step(&self) -> u64 {
        let tp = if self.sequence_parallel {
            self.tp as u64
        } else {
            1
        };
        let cp = if self.cp > 1 { 2 * self.cp as u64 } else { 1 };
        16 * tp * cp
    }

    /// The same layout with sequence parallelism forced on or off.
    pub const fn with_sequence_parallel(self, on: bool) -> Self {
        Parallel {
            sequence_parallel: on,
            ..self
        }
    }
}

impl fmt::Display for Parallel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "tp{} ep{} etp{} cp{}",
            self.tp, self.ep, self.etp, self.cp
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_step_keeps_every_ranks_rows_a_multiple_of_16() {
        assert_eq!(Parallel::tp(1).token_step(), 16);
        assert_eq!(Parallel::tp(8).token_step(), 128);
        assert_eq!(
            Parallel::tp(8).with_sequence_parallel(false).token_step(),
            16
        );
        assert_eq!(Parallel::new(2, 1, 1, 2).token_step(), 128);
        // 1456 tokens at TP 8: 182 rows a rank, which TE's FP8 refuses.
        assert_ne!(1456 % Parallel::tp(8).token_step(), 0);
    }
}
