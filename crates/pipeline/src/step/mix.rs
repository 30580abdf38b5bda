//! Per-module recipes in `gen-policy` with the step model: each further recipe's inputs and
//! check at every layout (files tagged `_<recipe>`), each recipe's numerics probe (`python -m
//! adaptive_fp8.bench.numerics`, one GPU, unless a report was given), then the choice over
//! them (`fp8_merge::model::recipes::mixed_policy`): `rules` stay the base recipe's policy, the
//! plan gives each key its recipe per count and execution.

use std::path::{Path, PathBuf};

use fp8_bench::recipe::RecipeOptions;
use fp8_merge::model::LayoutModel;
use fp8_merge::numerics::{MAX_NUMERICS_BYTES, NumericsBound, parse_numerics};
use fp8_policy::{Policy, Recipe};

use super::Layout;
use super::command::{RecipeMix, StepJob};
use super::worker::{Clock, WorkerEnd, first_sentence, run_worker};
use crate::generate::{GenOptions, GenOutcome};

impl Layout<'_> {
    /// This layout measured, modelled and checked in each recipe of `mix` beside the base.
    pub(super) fn other_recipes(
        &self,
        mix: &RecipeMix,
        say: &dyn Fn(&str),
        outcome: &mut GenOutcome,
    ) -> Result<Vec<(Recipe, LayoutModel)>, String> {
        let mut out = Vec::new();
        for &r in &mix.recipes {
            let mut o = self.o.clone();
            o.measure.recipe = RecipeOptions::new(r, None, None, None)?;
            let other = Layout {
                o: &o,
                job: self.job,
                config: self.config,
                model: self.model,
                p: self.p,
                reports_dir: self.reports_dir,
                clock: self.clock,
                tag: format!("_{}", r.name()),
            };
            say(&format!(
                "{} {}: the same in {r}, for the per-module recipe choice",
                self.model, self.p
            ));
            if let Some(lm) = other.model(say, outcome)? {
                out.push((r, lm));
            }
        }
        Ok(out)
    }
}

/// What the numerics probe of one model needs.
pub(super) struct Probe<'a> {
    pub(super) o: &'a GenOptions,
    pub(super) job: &'a StepJob,
    pub(super) config: &'a Path,
    pub(super) model: &'a str,
    /// The expert-parallel size of the model's first layout (the probe holds one EP rank's
    /// experts on its one GPU).
    pub(super) ep: u32,
    pub(super) reports_dir: &'a Path,
    pub(super) clock: &'a Clock,
}

impl Probe<'_> {
    fn out(&self, r: Recipe) -> PathBuf {
        self.reports_dir
            .join(format!("{}_{}_numerics.json", self.model, r.name()))
    }

    /// The probe's command line for `r`: 2 probed steps of the step's layers at 4096 tokens, or
    /// at the largest swept count where that is smaller (the error barely depends on the count).
    fn command(&self, r: Recipe) -> Vec<String> {
        let seq = self
            .job
            .tokens
            .iter()
            .copied()
            .max()
            .unwrap_or(4096)
            .min(4096);
        let mut a: Vec<String> = [
            "-m",
            "adaptive_fp8.bench.numerics",
            "--model",
            &self.config.display().to_string(),
            "--recipe",
            r.name(),
            "--layers",
            &self.job.layers.to_string(),
            "--seq-length",
            &seq.to_string(),
            "--steps",
            "2",
            "--out",
            &self.out(r).display().to_string(),
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        if self.ep > 1 {
            a.extend(["--ep".to_owned(), self.ep.to_string()]);
        }
        if let Some(d) = self.job.dense_layers {
            a.extend(["--dense-layers".to_owned(), d.to_string()]);
        }
        if let Some(c) = &self.o.config_root {
            a.extend(["--config-root".to_owned(), c.display().to_string()]);
        }
        a
    }

    /// `r`'s numerics: the given report where there is one, else the probe's.
    fn bound(
        &self,
        mix: &RecipeMix,
        r: Recipe,
        say: &dyn Fn(&str),
        outcome: &mut GenOutcome,
    ) -> Result<NumericsBound, String> {
        if let Some(b) = mix.numerics.iter().find(|b| b.report.recipe == Some(r)) {
            return Ok(b.clone());
        }
        let out = self.out(r);
        say(&format!(
            "{}: the numerics probe in {r} (each module's quantization error)",
            self.model
        ));
        let why = |e: String| {
            format!(
                "{}: the numerics probe in {r} wrote no report ({e}); the per-module recipe \
                 choice needs each recipe's error; fix: run `{} {}` and pass its report with \
                 --numerics, or leave out --recipes",
                self.model,
                self.o.python,
                self.command(r).join(" ")
            )
        };
        let end = run_worker(&self.o.python, &self.command(r), self.clock, &out)
            .map_err(|e| why(first_sentence(&e)))?;
        if end == WorkerEnd::Stopped {
            return Err(why("the time limit ran out".to_owned()));
        }
        let text = fp8_io::read_to_string_limited(&out, MAX_NUMERICS_BYTES)
            .map_err(|e| why(first_sentence(&e.to_string())))?;
        let report = parse_numerics(&text, &out).map_err(|e| why(e.to_string()))?;
        outcome.reports.push(out);
        Ok(NumericsBound {
            report,
            max_quant_error: mix.max_quant_error,
        })
    }
}

/// The per-module recipe policy of one model: the base recipe's layouts (`base`), the other
/// recipes' (`others`), and every recipe's numerics.
pub(super) fn mixed_policy(
    probe: &Probe,
    mix: &RecipeMix,
    base: &[LayoutModel],
    others: Vec<(Recipe, LayoutModel)>,
    say: &dyn Fn(&str),
    outcome: &mut GenOutcome,
) -> Result<Policy, String> {
    let base_recipe = probe.o.measure.recipe.recipe();
    let mut bounds = Vec::new();
    for &r in std::iter::once(&base_recipe).chain(&mix.recipes) {
        bounds.push(probe.bound(mix, r, say, outcome)?);
    }
    let mut layouts: Vec<(Recipe, LayoutModel)> =
        base.iter().cloned().map(|m| (base_recipe, m)).collect();
    layouts.extend(others);
    let margin = fp8_merge::model::ChoiceOptions::default().margin;
    fp8_merge::model::recipes::mixed_policy(base_recipe, &layouts, &bounds, margin)
        .map_err(|e| e.to_string())
}
