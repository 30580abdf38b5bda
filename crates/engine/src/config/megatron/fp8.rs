//! A Megatron config's FP8 fields: the recipe it trains (Megatron's default where FP8 is on
//! without one), its format, delayed scaling's amax options, and its CUDA-graph execution.

use crate::model::Fp8Settings;

use super::super::error::ConfigError;
use super::super::fields::Fields;

/// The config's selective-FP8 fields (the seed's), and the recipe it trains: `fp8_recipe`, else
/// Megatron's default (`delayed`) where FP8 is on (`fp8` / `--fp8-format` set) without one.
pub(super) fn fp8_settings(
    f: Fields<'_>,
    defaults: &mut Vec<String>,
) -> Result<Fp8Settings, ConfigError> {
    let named = f.opt_str(&["fp8_recipe"])?;
    let on_without = named.is_none().then(|| fp8_on(f)).flatten();
    if let Some((k, v)) = &on_without {
        defaults.push(format!(
            "fp8_recipe absent with {k} {v}: delayed (Megatron's default); give fp8_recipe \
             (--fp8-recipe) for another"
        ));
    }
    let recipe_by_default = on_without.is_some();
    let recipe = named.or(recipe_by_default.then_some("delayed"));
    let fp8 = Fp8Settings {
        selective_fp8: f.opt_bool(&["selective_fp8"])?.unwrap_or(false),
        policy_path: f.opt_str(&["fp8_dynamic_policy_path"])?.map(str::to_owned),
        num_tokens: f.opt_u64(&["fp8_dynamic_num_tokens"])?.filter(|t| *t > 0),
        recipe: recipe.map(str::to_owned),
        recipe_by_default,
        format: fp8_on(f)
            .map(|(_, v)| v.to_ascii_lowercase())
            .filter(|v| v != "true"),
        amax_history_len: f.opt_u64(&["fp8_amax_history_len"])?,
        amax_compute_algo: f.opt_str(&["fp8_amax_compute_algo"])?.map(str::to_owned),
        execution: config_execution(f)?,
        native_config: f.opt_str(&["te_precision_config_file"])?.map(str::to_owned),
    };
    Ok(megatron_amax(fp8, defaults))
}

/// A config that trains delayed scaling without its amax options runs Megatron's
/// (`TransformerConfig`: a history of 1, `most_recent`), not TE's recipe defaults.
fn megatron_amax(mut fp8: Fp8Settings, defaults: &mut Vec<String>) -> Fp8Settings {
    let delayed = fp8.recipe.as_deref();
    if !delayed.is_some_and(|r| r.trim().eq_ignore_ascii_case("delayed")) {
        return fp8;
    }
    if fp8.amax_history_len.is_none() {
        defaults.push(
            "fp8_amax_history_len absent with delayed scaling: 1 (Megatron's default)".to_owned(),
        );
        fp8.amax_history_len = Some(1);
    }
    if fp8.amax_compute_algo.is_none() {
        defaults.push(
            "fp8_amax_compute_algo absent with delayed scaling: most_recent (Megatron's default)"
                .to_owned(),
        );
        fp8.amax_compute_algo = Some("most_recent".to_owned());
    }
    fp8
}

/// The field that turns FP8 training on, with its value: Megatron's `fp8` (the format; a launch
/// script's `--fp8-format`), a format name or `true`. Off: absent, null, false, empty or
/// `none`.
fn fp8_on(f: Fields<'_>) -> Option<(&'static str, String)> {
    ["fp8", "fp8_format"]
        .into_iter()
        .find_map(|k| match f.map.get(k)? {
            serde_json::Value::String(s)
                if !s.trim().is_empty() && !s.trim().eq_ignore_ascii_case("none") =>
            {
                Some((k, s.trim().to_owned()))
            }
            serde_json::Value::Bool(true) => Some((k, "true".to_owned())),
            _ => None,
        })
}

/// The execution a config's CUDA-graph fields give, when it has any.
fn config_execution(f: Fields<'_>) -> Result<Option<fp8_policy::Execution>, ConfigError> {
    let imp = f.opt_str(&["cuda_graph_impl"])?;
    let flag = f.opt_bool(&["enable_cuda_graph"])?.unwrap_or(false)
        || f.opt_bool(&["external_cuda_graph"])?.unwrap_or(false);
    let given = imp.is_some() || f.has("enable_cuda_graph") || f.has("external_cuda_graph");
    if !given {
        return Ok(None);
    }
    crate::execution::execution_of(imp, flag)
        .map(Some)
        .ok_or_else(|| {
            f.err(
                "cuda_graph_impl",
                format!(
                    "`{}` is not a value Megatron takes",
                    imp.unwrap_or_default()
                ),
                format!("one of {}", crate::execution::CUDA_GRAPH_IMPLS.join(", ")),
            )
        })
}
