//! The flags of the Transformer Engine backend, shared by `bench` and `gen-policy`.

/// `--python` and `--recompute` (with the reference tool's environment variable).
#[derive(Debug, Clone, clap::Args)]
pub struct TeArgs {
    /// The Python interpreter with torch, transformer_engine and adaptive_fp8 (--backend te).
    #[arg(
        long,
        env = "FP8SEL_PYTHON",
        default_value = "python3",
        value_name = "PYTHON"
    )]
    pub python: String,
    /// Recompute the forward inside the backward (activation recompute), as the reference tool
    /// times by default (--backend te only). Recorded in the report; reports with and without
    /// it do not merge.
    #[arg(long, env = "TE_LAYER_PERF_RECOMPUTE")]
    pub recompute: bool,
}
