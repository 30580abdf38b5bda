//! The merge flags this project added for the trainer's objective, shared by `merge-policy` and
//! `gen-policy`: how shared rule keys are decided, the host profile of an eager trainer, and the
//! numerics bound.

use std::path::{Path, PathBuf};

use fp8_merge::host::{HostProfile, MAX_HOST_PROFILE_BYTES};
use fp8_merge::numerics::{
    DEFAULT_MAX_QUANT_ERROR, MAX_NUMERICS_BYTES, NumericsBound, parse_numerics,
};
use fp8_merge::{MergeOptions, SharedKey};

use crate::error::{CliError, CliResult};

/// `--shared-key`, `--host-profile`, `--numerics` and `--max-quant-error`.
#[derive(Debug, Clone, clap::Args)]
pub struct ObjectiveArgs {
    /// How a rule key shared by several modules (DeepSeek-V3's dense and shared-expert FC2 at
    /// one TP) is decided: `step` (default) from the instance-weighted sum of their times (the
    /// reports' instance counts, from the model's layer counts), `all-win` only where every
    /// module wins on its own. The policy's provenance lists each module's own verdict.
    #[arg(long, default_value = "step", value_parser = ["step", "all-win"])]
    pub shared_key: String,
    /// For eager trainers: the host profile `python -m adaptive_fp8.bench.probe_host --out FILE`
    /// measured on this machine (per kind and precision, and per local expert for grouped
    /// modules); each module's times become max(time, host). Exclusive with --host-floor-ms.
    #[arg(long, value_name = "FILE")]
    pub host_profile: Option<PathBuf>,
    /// A numerics report (`python -m adaptive_fp8.bench.numerics`): every module whose FP8
    /// quantize-dequantize error (relative RMS, worst operand) is over --max-quant-error runs
    /// BF16 whatever its speedup (the step model's keys too, before its check, so the check
    /// times the bounded plan); provenance names the bound and each key it kept BF16, and
    /// explain gives that as the reason. With `merge-policy --step-model` inputs of several
    /// recipes, or `gen-policy --recipes`, one report per recipe (each names its `recipe`): a
    /// key runs a recipe only within the bound.
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub numerics: Vec<PathBuf>,
    /// The bound for --numerics (and for `gen-policy --recipes`' own probes), a relative RMS
    /// error [default: 0.05: E4M3's round trip of a well-scaled tensor is about 0.027 (measured
    /// on the H200 for Llama-3.2-1B's modules in blockwise and tensorwise,
    /// docs/device-logs/numerics/num6), so the bound admits that and refuses a module with
    /// twice that error]
    #[arg(long, value_name = "E")]
    pub max_quant_error: Option<f64>,
}

impl ObjectiveArgs {
    /// `--max-quant-error` bounds the errors of reports: of --numerics, or of the probes that
    /// `probes` says the command runs itself.
    pub fn check_bound_has_reports(&self, probes: bool) -> CliResult<()> {
        if self.max_quant_error.is_some() && self.numerics.is_empty() && !probes {
            return Err(CliError::input(
                "--max-quant-error bounds the quantization errors of a numerics report, and none \
                 was given; fix: pass --numerics FILE (python -m adaptive_fp8.bench.numerics \
                 writes it), or leave out --max-quant-error",
            ));
        }
        Ok(())
    }

    /// The merge settings of `merge-policy` and `gen-policy`, built once: these flags, the
    /// threshold and margin, and `--trainer` (`both` and absent leave it unset: the caller
    /// folds or keeps the reports' own times).
    pub fn merge_options(
        &self,
        threshold: f64,
        margin: f64,
        trainer: Option<&str>,
    ) -> CliResult<MergeOptions> {
        let (shared_key, host_profile) = self.options()?;
        Ok(MergeOptions {
            threshold,
            margin,
            trainer: trainer
                .filter(|t| *t != "both")
                .map(str::parse::<fp8_policy::Execution>)
                .transpose()
                .map_err(CliError::input)?,
            shared_key,
            host_profile,
            numerics: self.numerics()?,
            ..MergeOptions::default()
        })
    }

    /// The shared-key rule and the loaded host profile, validated.
    pub fn options(&self) -> CliResult<(SharedKey, Option<HostProfile>)> {
        let shared = self.shared_key.parse().map_err(CliError::input)?;
        let profile = self
            .host_profile
            .as_deref()
            .map(load_host_profile)
            .transpose()?;
        Ok((shared, profile))
    }

    /// The numerics bound, loaded and validated, when one report is given (several: use
    /// [`ObjectiveArgs::numerics_bounds`], the per-recipe choice).
    pub fn numerics(&self) -> CliResult<Option<NumericsBound>> {
        let mut all = self.numerics_bounds()?;
        if all.len() > 1 {
            return Err(CliError::input(
                "--numerics: several reports are for a choice among recipes (merge-policy --step-model with inputs of several recipes); a merge of one recipe takes one",
            ));
        }
        Ok(all.pop())
    }

    /// Every numerics report given, each with the bound (--max-quant-error, else
    /// [`DEFAULT_MAX_QUANT_ERROR`]).
    pub fn numerics_bounds(&self) -> CliResult<Vec<NumericsBound>> {
        let max = self.max_quant_error.unwrap_or(DEFAULT_MAX_QUANT_ERROR);
        if !(max.is_finite() && max > 0.0) {
            return Err(CliError::input(format!(
                "--max-quant-error {max}: not a positive number; fix: give the largest relative RMS error a module may have and run FP8, e.g. 0.05"
            )));
        }
        self.numerics
            .iter()
            .map(|path| {
                let text = fp8_io::read_to_string_limited(path, MAX_NUMERICS_BYTES)?;
                let report = parse_numerics(&text, path).map_err(CliError::input)?;
                Ok(NumericsBound {
                    report,
                    max_quant_error: max,
                })
            })
            .collect()
    }
}

/// Reads a host profile (bounded, regular files only) and validates it.
fn load_host_profile(path: &Path) -> CliResult<HostProfile> {
    let bytes = fp8_io::read_limited(path, MAX_HOST_PROFILE_BYTES)?;
    let text = String::from_utf8(bytes).map_err(|_| {
        CliError::input(format!("--host-profile {}: not UTF-8 text", path.display()))
    })?;
    HostProfile::parse(&text, &path.display().to_string())
        .map_err(|e| CliError::input(e.to_string()))
}
