//! The parallel sizes a model's per-rank shapes depend on, declared once for every command that
//! takes a whole model (explain, check, te-precision-config, bench). `decide` takes one module's
//! sizes instead (its `--tp` is required: there is no config to default from).

use crate::error::{CliError, CliResult};

/// `--tp`, `--ep`, `--etp`, with Megatron's long names as aliases.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct LayoutArgs {
    /// Tensor-parallel size [default: the config's tensor_model_parallel_size, else 1].
    #[arg(long, alias = "tensor-model-parallel-size", value_parser = clap::value_parser!(u32).range(1..))]
    pub tp: Option<u32>,
    /// Expert-parallel size [default: the config's, else 1].
    #[arg(long, alias = "expert-model-parallel-size", value_parser = clap::value_parser!(u32).range(1..))]
    pub ep: Option<u32>,
    /// Expert tensor-parallel size [default: the config's, else --tp as in Megatron].
    #[arg(long, alias = "expert-tensor-parallel-size", value_parser = clap::value_parser!(u32).range(1..))]
    pub etp: Option<u32>,
}

/// The reference tool's variables for the three sizes, in field order.
const REFERENCE_ENV: [(&str, &str); 3] = [
    ("TE_LAYER_PERF_TP_SIZE", "--tp"),
    ("TE_LAYER_PERF_EP_SIZE", "--ep"),
    ("TE_LAYER_PERF_ETP_SIZE", "--etp"),
];

impl LayoutArgs {
    /// Each size not given as a flag taken from the reference tool's variable, as `fp8sel bench`
    /// does for scripts written for that tool; `get` reads the environment.
    pub fn or_reference_env(&self, get: impl Fn(&str) -> Option<String>) -> CliResult<LayoutArgs> {
        let mut out = self.clone();
        for ((var, flag), field) in
            REFERENCE_ENV
                .iter()
                .zip([&mut out.tp, &mut out.ep, &mut out.etp])
        {
            if field.is_some() {
                continue;
            }
            let Some(raw) = get(var).filter(|v| !v.is_empty()) else {
                continue;
            };
            let v = raw
                .trim()
                .parse::<u32>()
                .ok()
                .filter(|v| *v >= 1)
                .ok_or_else(|| {
                    CliError::input(format!(
                        "{var}={raw:?}: expected a positive integer (the value of {flag})"
                    ))
                })?;
            *field = Some(v);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flag_beats_the_reference_variable_and_a_bad_value_names_it() {
        let env = |k: &str| match k {
            "TE_LAYER_PERF_TP_SIZE" => Some("4".to_owned()),
            "TE_LAYER_PERF_EP_SIZE" => Some("8".to_owned()),
            _ => None,
        };
        let given = LayoutArgs {
            tp: Some(2),
            ..Default::default()
        };
        let l = given.or_reference_env(env).unwrap();
        assert_eq!((l.tp, l.ep, l.etp), (Some(2), Some(8), None));
        let bad = LayoutArgs::default()
            .or_reference_env(|k| (k == "TE_LAYER_PERF_ETP_SIZE").then(|| "0".to_owned()))
            .unwrap_err();
        assert!(
            bad.message.contains("TE_LAYER_PERF_ETP_SIZE=\"0\""),
            "{}",
            bad.message
        );
        assert!(
            bad.message.contains("--etp") && bad.code == 2,
            "{}",
            bad.message
        );
    }
}
