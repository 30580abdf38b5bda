//! The recipe flags: what a sweep measures (`bench`, `gen-policy`), and what the trainer runs
//! (`decide`, `explain`, `check`, which warn when the policy was made for another recipe).

use std::path::{Path, PathBuf};

use fp8_bench::recipe::{AmaxAlgo, Fp8Format, Recipe, RecipeOptions};
use fp8_policy::Policy;

use crate::error::{CliError, CliResult};

/// `--recipe` with its options, for commands that measure.
#[derive(Debug, Clone, clap::Args)]
pub struct RecipeArgs {
    /// FP8 recipe, as Megatron's --fp8-recipe names it: blockwise (TE Float8BlockScaling),
    /// tensorwise (Float8CurrentScaling; `current`, the reference tool's name, is accepted),
    /// delayed (DelayedScaling), mxfp8 (MXFP8BlockScaling: Blackwell only; on Hopper use
    /// --backend model --device-profile b200). Recorded in the report and the policy.
    /// [default: the recipe the model config trains with (its fp8_recipe, a launch script's
    /// --fp8-recipe; delayed, Megatron's default, where FP8 is on without one), else blockwise]
    #[arg(
        long,
        alias = "fp8-recipe",
        env = "TE_LAYER_PERF_FP8_RECIPE",
        value_name = "RECIPE"
    )]
    pub recipe: Option<Recipe>,
    /// FP8 format: e4m3, or hybrid (E4M3 forward, E5M2 gradients) [default: the model config's
    /// (its fp8, a launch script's --fp8-format), else hybrid for delayed, as TE's
    /// DelayedScaling, and e4m3 otherwise]. Blockwise and mxfp8 are measured in E4M3 only.
    #[arg(long, value_name = "FORMAT")]
    pub fp8_format: Option<Fp8Format>,
    /// Delayed scaling: steps of amax history [default: the model config's
    /// fp8_amax_history_len; 1, Megatron's, where it trains delayed scaling without one; else
    /// 1024, TE's].
    #[arg(long, alias = "fp8-amax-history-len", value_name = "N")]
    pub amax_history_len: Option<u32>,
    /// Delayed scaling: how the history becomes the scale, max or most_recent [default: the
    /// model config's fp8_amax_compute_algo; most_recent, Megatron's, where it trains delayed
    /// scaling without one; else max, TE's].
    #[arg(long, alias = "fp8-amax-compute-algo", value_name = "ALGO")]
    pub amax_compute_algo: Option<AmaxAlgo>,
}

impl RecipeArgs {
    /// The validated recipe options: `--recipe`, else `trained` (the configs' own,
    /// [`configs_fp8`]), else blockwise; each option the flag's, else the configs' (`given`,
    /// [`configs_fp8`]: a format only for the recipes fp8sel measures in both, the amax
    /// options only for delayed scaling), else the recipe's TE default. The notes say where a
    /// config's option was not taken.
    pub fn options(
        &self,
        trained: Option<Recipe>,
        given: &ConfigOptions,
    ) -> CliResult<(RecipeOptions, Vec<String>)> {
        let recipe = self.recipe.or(trained).unwrap_or(Recipe::Blockwise);
        let (format, notes) = given.format_for(recipe, self.fp8_format);
        let delayed = recipe == Recipe::Delayed;
        let options = RecipeOptions::new(
            recipe,
            format,
            self.amax_history_len
                .or(given.amax_history_len.filter(|_| delayed)),
            self.amax_compute_algo
                .or(given.amax_compute_algo.filter(|_| delayed)),
        )
        .map_err(CliError::input)?;
        Ok((options, notes))
    }
}

/// The FP8 options the model configs train with besides the recipe: Megatron's `fp8` (a launch
/// script's `--fp8-format`), and delayed scaling's `fp8_amax_history_len` and
/// `fp8_amax_compute_algo` (Megatron's defaults, 1 and most_recent, where a config trains delayed
/// scaling without them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigOptions {
    /// The format, and the file it came from.
    pub format: Option<(Fp8Format, PathBuf)>,
    /// The amax history length.
    pub amax_history_len: Option<u32>,
    /// The amax compute algorithm.
    pub amax_compute_algo: Option<AmaxAlgo>,
}

impl ConfigOptions {
    /// The format to measure `recipe` in: the flag's, else the config's where fp8sel measures
    /// the recipe in it (blockwise, mxfp8 and nvfp4 in E4M3 only: a config's hybrid is noted,
    /// not measured), else none (the recipe's default).
    fn format_for(
        &self,
        recipe: Recipe,
        flag: Option<Fp8Format>,
    ) -> (Option<Fp8Format>, Vec<String>) {
        match (flag, &self.format) {
            (Some(f), _) => (Some(f), Vec::new()),
            (None, Some((Fp8Format::Hybrid, file)))
                if !matches!(recipe, Recipe::Tensorwise | Recipe::Delayed) =>
            {
                let note = format!(
                    "{}: fp8 hybrid: {recipe} is measured in E4M3, the format fp8sel times it in \
                     (the GEMMs' FP8 rate is the same in both formats)",
                    file.display()
                );
                (None, vec![note])
            }
            (None, f) => (f.as_ref().map(|(f, _)| *f), Vec::new()),
        }
    }
}

/// The model configs' FP8 settings, each config read once: the recipe they train with
/// ([`configs_recipe`]; none where a flag, `told`, chose one) and their other options
/// ([`ConfigOptions`]).
pub fn configs_fp8(
    told: bool,
    models: &[PathBuf],
    config_root: Option<&Path>,
) -> CliResult<(Option<Trained>, ConfigOptions)> {
    let mut read = Vec::with_capacity(models.len());
    for m in models {
        read.push((m, super::model_args::load_config(m, config_root)?));
    }
    let trained = if told { None } else { configs_recipe(&read)? };
    Ok((trained, configs_options(&read)?))
}

/// The FP8 options every model config trains with ([`ConfigOptions`]): the same in all of them
/// that set them, else refused; a value Megatron does not take is refused naming the file.
fn configs_options(read: &[(&PathBuf, fp8_engine::ModelDesc)]) -> CliResult<ConfigOptions> {
    let mut out = ConfigOptions::default();
    for (m, desc) in read {
        let Some(fp8) = desc.components.iter().map(|c| &c.fp8).find(|f| {
            f.format.is_some() || f.amax_history_len.is_some() || f.amax_compute_algo.is_some()
        }) else {
            continue;
        };
        let bad = |field: &str, e: String| {
            CliError::input(format!(
                "{}: {field}: {e}; fix: give a value Megatron takes",
                m.display()
            ))
        };
        let format = fp8
            .format
            .as_deref()
            .map(|f| f.parse::<Fp8Format>().map_err(|e| bad("fp8", e)))
            .transpose()?;
        let max = fp8_bench::recipe::MAX_AMAX_HISTORY;
        let len = fp8
            .amax_history_len
            .map(|n| {
                u32::try_from(n)
                    .ok()
                    .filter(|n| (1..=max).contains(n))
                    .ok_or_else(|| {
                        bad("fp8_amax_history_len", format!("{n} is outside 1 to {max}"))
                    })
            })
            .transpose()?;
        let algo = fp8
            .amax_compute_algo
            .as_deref()
            .map(|a| {
                a.parse::<AmaxAlgo>()
                    .map_err(|e| bad("fp8_amax_compute_algo", e))
            })
            .transpose()?;
        let first_format = out.format.as_ref().map(|(f, _)| *f);
        agree(m, "fp8 formats", first_format, format)?;
        agree(m, "fp8_amax_history_len", out.amax_history_len, len)?;
        agree(m, "fp8_amax_compute_algo", out.amax_compute_algo, algo)?;
        if out.format.is_none() {
            out.format = format.map(|f| (f, (*m).clone()));
        }
        out.amax_history_len = out.amax_history_len.or(len);
        out.amax_compute_algo = out.amax_compute_algo.or(algo);
    }
    Ok(out)
}

/// `m`'s `value` of `field` against the first config's (`first`): refused where they differ.
fn agree<T: PartialEq>(m: &Path, field: &str, first: Option<T>, value: Option<T>) -> CliResult<()> {
    match (first, value) {
        (Some(a), Some(b)) if a != b => Err(CliError::input(format!(
            "the model configs train with different {field} ({} differs from the first); fix: one run per setting, or the flag to choose one",
            m.display()
        ))),
        _ => Ok(()),
    }
}

/// The recipe the model configs train with, and whether it is Megatron's default (FP8 on without
/// an `fp8_recipe`) rather than one a config names.
#[derive(Debug, Clone, Copy)]
pub struct Trained {
    /// The recipe.
    pub recipe: Recipe,
    /// Megatron's default (`delayed`), no config naming it.
    pub by_default: bool,
}

/// The recipe the model configs train with (each one's fp8_recipe, a launch script's
/// --fp8-recipe, else Megatron's default where FP8 is on), where any has one: the same for all of
/// them, else refused; one it cannot read is refused, naming the file.
fn configs_recipe(read: &[(&PathBuf, fp8_engine::ModelDesc)]) -> CliResult<Option<Trained>> {
    let mut named: Vec<(&PathBuf, Recipe)> = Vec::new();
    let mut by_default = false;
    for &(m, ref desc) in read {
        let first = desc.components.iter().find_map(|c| {
            let fp8 = &c.fp8;
            fp8.recipe.as_deref().map(|s| (s, fp8.recipe_by_default))
        });
        if let Some((s, defaulted)) = first {
            by_default |= defaulted;
            let r = s.parse::<Recipe>().map_err(|e| {
                CliError::input(format!(
                    "{}: fp8_recipe {s:?}: {e}; fix: pass --recipe to choose the recipe to measure",
                    m.display()
                ))
            })?;
            named.push((m, r));
        }
    }
    match named.first() {
        Some(&(_, r)) if named.iter().any(|&(_, x)| x != r) => {
            let each: Vec<String> = named
                .iter()
                .map(|(m, x)| format!("{} {x}", m.display()))
                .collect();
            Err(CliError::input(format!(
                "the model configs train with different FP8 recipes ({}); fix: pass --recipe for the one to measure, or one run per recipe",
                each.join(", ")
            )))
        }
        first => Ok(first.map(|&(_, recipe)| Trained { recipe, by_default })),
    }
}

/// `--recipe` of the trainer, for commands that read a policy.
#[derive(Debug, Clone, clap::Args)]
pub struct TrainerRecipe {
    /// The FP8 recipe the trainer runs (blockwise, tensorwise or current, delayed, mxfp8, nvfp4)
    /// [default: the model config's fp8_recipe, when it has one]. A policy made for another
    /// recipe still answers, with a warning: its crossovers are not this recipe's.
    #[arg(long, alias = "fp8-recipe", value_name = "RECIPE")]
    pub recipe: Option<Recipe>,
    /// How the trainer runs its step: eager (Megatron's --cuda-graph-impl none, its default) or
    /// graphed (CUDA graphs). A rule's min_tokens_graphed applies to graphed steps; min_tokens
    /// to eager ones and to every rule without it. [default: the model config's
    /// cuda_graph_impl (local, transformer_engine, full_iteration: graphed), else eager]
    #[arg(long, value_name = "EXECUTION")]
    pub execution: Option<fp8_policy::Execution>,
}

impl TrainerRecipe {
    /// The trainer's recipe: the flag, else `config` (a model config's `fp8_recipe`). A config
    /// value that names no recipe fp8sel knows (Megatron's `custom`, say) is reported on stderr
    /// and ignored: it cannot be compared with a policy, and it must not stop an explain.
    pub fn resolve(&self, config: Option<&str>) -> CliResult<Option<Recipe>> {
        match (self.recipe, config) {
            (Some(r), _) => Ok(Some(r)),
            (None, Some(c)) => match c.parse::<Recipe>() {
                Ok(r) => Ok(Some(r)),
                Err(e) => {
                    eprintln!(
                        "warning: the model config's fp8_recipe: {e}; pass --recipe to compare the policy's recipe with the trainer's"
                    );
                    Ok(None)
                }
            },
            (None, None) => Ok(None),
        }
    }

    /// The warnings for `policies` under the trainer's recipe; each is also printed on stderr
    /// unless `quiet`.
    pub fn warnings<'a>(
        recipe: Option<Recipe>,
        policies: impl IntoIterator<Item = (String, &'a Policy)>,
        quiet: bool,
    ) -> Vec<String> {
        let Some(r) = recipe else { return Vec::new() };
        let mut out = Vec::new();
        for (name, p) in policies {
            if let Some(w) = p.recipe_warning(r) {
                let w = format!("{name}: {w}");
                if !quiet {
                    eprintln!("warning: {w}");
                }
                out.push(w);
            }
        }
        out
    }
}

/// gen-policy's measured recipe: --recipe's (else the configs', `trained`, else blockwise), or
/// with --recipes the first of them (the base).
pub fn base_recipe(
    flag: &RecipeArgs,
    recipes: &[Recipe],
    trained: Option<Recipe>,
    given: &ConfigOptions,
) -> CliResult<(RecipeOptions, Vec<String>)> {
    let Some(&first) = recipes.first() else {
        return flag.options(trained, given);
    };
    let mut seen = Vec::new();
    for &r in recipes {
        if !fp8_policy::PLAN_RECIPES.contains(&r) {
            return Err(CliError::input(format!(
                "--recipes {r}: Megatron's per-module config runs blockwise, tensorwise, mxfp8 or nvfp4 \
                 per module; fix: choose among those, or measure {r} alone with --recipe {r}"
            )));
        }
        if seen.contains(&r) {
            return Err(CliError::input(format!("--recipes names {r} twice")));
        }
        seen.push(r);
    }
    if seen.len() < 2 {
        return Err(CliError::input(format!(
            "--recipes {first}: a choice needs two recipes or more; fix: --recipes {first},tensorwise, or --recipe {first}"
        )));
    }
    if let Some(r) = flag.recipe.filter(|&r| r != first) {
        return Err(CliError::input(format!(
            "--recipe {r} and --recipes {first}: the base is the first of --recipes; fix: leave out --recipe"
        )));
    }
    let (format, notes) = given.format_for(first, flag.fp8_format);
    let options = RecipeOptions::new(first, format, None, None).map_err(CliError::input)?;
    Ok((options, notes))
}

/// `e` (an error of a run that measured `trained`, the configs' own recipe), saying where the
/// recipe came from when it names it.
pub fn whence(e: String, trained: Option<Trained>) -> CliError {
    match trained {
        Some(Trained {
            recipe: r,
            by_default,
        }) if e.contains(r.name()) => {
            let why = if by_default {
                "FP8 on without fp8_recipe: Megatron's default"
            } else {
                "its fp8_recipe"
            };
            CliError::input(format!(
                "{e}\n  ({r} is the recipe the model config trains with, {why}; --recipe measures another)"
            ))
        }
        _ => CliError::input(e),
    }
}
