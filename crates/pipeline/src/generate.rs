//! The job of `fp8sel gen-policy` and `cargo xtask gen-policy`: measure (or estimate) every
//! layout of every model, then build policies, plots and summaries.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use fp8_bench::cuda::MeasureOptions;
use fp8_bench::driver;
use fp8_bench::job::{SweepJob, points};
use fp8_bench::runner::Backend;
use fp8_bench::sweep::BenchPoint;
use fp8_bench::sweep::SplitMode;
use fp8_engine::{ModelDesc, Parallel};
use fp8_merge::MergeOptions;
use fp8_report::{Point, PointId, Status};

use crate::build::{Files, load_models};
use crate::host::HostSource;
use crate::layout::{LayoutJob, bench_layout};
pub use crate::progress::{Progress, Silent, TermProgress};
pub use files::{orphans, stale, write_files};
pub(crate) use layouts::no_layout;
pub use layouts::{config_tp_note, default_layouts, layouts_left_out};

mod files;
mod layouts;

/// The models of `fixtures/models/` (top-level configs only; `parts/` and `sel/` are pieces and
/// variants).
pub fn default_models(root: &Path) -> Vec<PathBuf> {
    let dir = root.join("fixtures/models");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

pub use fp8_bench::backend::Chosen;

/// Picks the backend (`fp8_bench::backend::choose`, on GPU 0): `auto` is the GPU when one opens,
/// else the cost model, with a note; `te` starts the TE worker with `python`.
pub fn choose(
    kind: &str,
    profile: &str,
    python: &str,
    recompute: bool,
    progress: &dyn Progress,
) -> Result<Chosen, String> {
    let spec = fp8_bench::backend::BackendSpec {
        kind: kind
            .parse()
            .map_err(|e: fp8_bench::backend::BackendError| e.to_string())?,
        device_profile: profile,
        device: 0,
        python,
        recompute,
    };
    fp8_bench::backend::choose(&spec, &|m| progress.note(&format!("gen-policy: {m}")))
        .map_err(|e| e.to_string())
}

/// Runs every layout of `model` and writes one report per layout into `reports_dir`.
///
/// Each distinct per-rank shape (a [`PointId`]: module, shape, experts, split, tokens) is
/// measured once: a later layout with the same shape (the experts at TP 1, 2 and 4 under one EP
/// and ETP; attention under one TP at several EPs) reuses the measurement, relabelled with its
/// own TP/ETP, and lists it under `provenance.reused_points`.
pub fn measure(
    backend: &mut dyn Backend,
    config: &Path,
    model: &ModelDesc,
    layouts: &[Parallel],
    reports_dir: &Path,
    opt: &MeasureOptions,
    progress: &dyn Progress,
) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(reports_dir).map_err(|e| format!("{}: {e}", reports_dir.display()))?;
    let mut written = Vec::new();
    // Keyed by the point's identity and its per-GEMM rows: the same logical tokens can mean other
    // rows in another layout (an unsplit TELinear runs on the sequence shard under TP).
    let mut measured: HashMap<(PointId, Vec<u64>), Point> = HashMap::new();
    for &parallel in layouts {
        let job = SweepJob {
            component: None,
            parallel,
            tokens: None,
            max_tokens: 32768,
            per_doubling: 1,
            seq_length: None,
            micro_batch_size: None,
            splits: vec![SplitMode::Uniform, SplitMode::Zipf(1.2)],
            modules: None,
        };
        let pts = points(model, &job)?;
        let todo: Vec<BenchPoint> = pts
            .iter()
            .filter(|p| !measured.contains_key(&(p.id(), p.splits.clone())))
            .cloned()
            .collect();
        progress.layout(&model.name, parallel, todo.len(), pts.len() - todo.len());
        let config = config.display().to_string();
        let layout = LayoutJob {
            model,
            config: &config,
            job: &job,
            opt,
            scales: "pow2",
            recompute: false,
            rank: None,
            resume_from: None,
        };
        let workers = driver::Workers::One(&mut *backend);
        let mut report =
            bench_layout(&layout, &todo, workers, progress).map_err(|e| e.to_string())?;
        let mut fresh: HashMap<PointId, Point> =
            report.points.drain(..).map(|p| (p.id(), p)).collect();
        for bp in &pts {
            let id = bp.id();
            let key = (id.clone(), bp.splits.clone());
            if let Some(p) = fresh.remove(&id) {
                if p.status != Status::Skipped {
                    measured.insert(key, p.clone());
                }
                report.points.push(p);
            } else if let Some(p) = measured.get(&key) {
                let mut p = p.clone();
                p.tp = bp.spec.tp;
                p.etp = bp.spec.etp;
                report.points.push(p);
                report.provenance.reused_points.push(id);
            }
        }
        let ep = if parallel.ep > 1 {
            format!("_ep{}", parallel.ep)
        } else {
            String::new()
        };
        let path = reports_dir.join(format!("{}_tp{}{ep}.json", model.name, parallel.tp));
        fp8_report::write(&report, &path).map_err(|e| e.to_string())?;
        written.push(path);
    }
    Ok(written)
}

/// What `gen-policy` is asked to do.
#[derive(Debug, Clone)]
pub struct GenOptions {
    /// Model configs.
    pub models: Vec<PathBuf>,
    /// How far Hydra `defaults` may reach (see `fp8_engine::LoadOptions`).
    pub config_root: Option<PathBuf>,
    /// TP sizes (`None`: 1, 2, 4, 8, those that divide the model).
    pub tp: Option<Vec<u32>>,
    /// EP sizes (`None`: the config's for MoE models, else 1).
    pub ep: Option<Vec<u32>>,
    /// ETP sizes (`None`: 1).
    pub etp: Option<Vec<u32>>,
    /// Merge settings.
    pub merge: MergeOptions,
    /// `auto`, `cuda`, `model` or `te`.
    pub backend: String,
    /// The interpreter that runs the TE worker (`te` backend).
    pub python: String,
    /// Activation recompute in the TE worker's backward (`te` backend).
    pub recompute: bool,
    /// Cost-model profile.
    pub device_profile: String,
    /// Measure this machine's host profile on a GPU where the package and TE import (when no
    /// profile was given).
    pub probe_host: bool,
    /// Measurement settings.
    pub measure: MeasureOptions,
    /// Where measured policies go (estimates go to `<policies>/estimated/<profile>/`).
    pub policies_dir: PathBuf,
    /// Where measured reports go (`<reports>/<gpu>/`; estimates keep theirs beside their policies).
    pub reports_base: PathBuf,
    /// Write outputs here instead (overrides `policies_dir` and the estimate directory).
    pub out: Option<PathBuf>,
    /// Per-module recipes: the further recipes measured beside `measure`'s (the base), and
    /// the numerics bound of the choice (`crate::module_mix` with the per-module backends).
    pub recipes: Option<crate::module_mix::RecipeMix>,
    /// Only this component of each model, measured and written (`None`: every one): a VLM's
    /// vision encoder beside its language model's step model.
    pub component: Option<fp8_engine::Role>,
}

impl GenOptions {
    /// Whether these options ask for a VLM's vision encoder alone.
    pub fn vision_encoder(&self) -> bool {
        self.component == Some(fp8_engine::Role::Vit)
    }

    /// Refuses, before anything is measured, a model config that a policy or summary written
    /// for it would overwrite (`<name>.json`, `.llm.json`, `.vit.json`, `.md` in any folder these
    /// options may write policies to: `out`, else the policies folder, its recipe's subfolder and
    /// the estimates').
    pub fn refuse_overwriting_configs(
        &self,
        models: &[(PathBuf, ModelDesc)],
    ) -> Result<(), String> {
        let recipe = self.measure.recipe.recipe().name();
        let dirs: Vec<PathBuf> = match &self.out {
            Some(d) => vec![d.clone()],
            None => {
                let est = self
                    .policies_dir
                    .join("estimated")
                    .join(&self.device_profile);
                vec![
                    self.policies_dir.clone(),
                    self.policies_dir.join(recipe),
                    est.join(recipe),
                    est,
                ]
            }
        };
        let configs: Vec<&Path> = models.iter().map(|(c, _)| c.as_path()).collect();
        for (_, m) in models {
            for end in ["json", "llm.json", "vit.json", "md"] {
                for d in &dirs {
                    fp8_io::refuse_same_file(
                        &d.join(format!("{}.{end}", m.name)),
                        configs.iter().copied(),
                    )
                    .map_err(|e| e.to_string())?;
                }
            }
        }
        Ok(())
    }
}

/// What `gen-policy` wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct GenOutcome {
    /// True when the cost model estimated instead of a GPU measuring.
    pub estimated: bool,
    /// The reports written (one per model and layout).
    pub reports: Vec<PathBuf>,
    /// Every file written under `out`.
    pub files: Vec<PathBuf>,
    /// Where the outputs went.
    pub out: PathBuf,
    /// What the run could not do as asked and what reading the configs left aside (resolvers
    /// kept as written), for stderr.
    pub notes: Vec<String>,
    /// Where the eager thresholds came from.
    pub host: HostSource,
}

impl GenOutcome {
    fn count(&self, ext: &str) -> usize {
        self.files
            .iter()
            .filter(|f| f.extension().is_some_and(|e| e == ext))
            .count()
    }

    /// The policies and summaries written (what a user opens next).
    pub fn documents(&self) -> impl Iterator<Item = &PathBuf> {
        self.files
            .iter()
            .filter(|f| f.extension().is_some_and(|e| e == "json" || e == "md"))
    }

    /// The one-line summary both commands end with.
    pub fn summary(&self) -> String {
        let est = if self.estimated {
            " (ESTIMATES from the cost model, not measurements)"
        } else {
            ""
        };
        format!(
            "{} report(s), {} policy file(s), {} plot(s) in {}{est}",
            self.reports.len(),
            self.count("json"),
            self.count("svg"),
            self.out.display()
        )
    }
}

/// Where the policies go and where the reports go: `out`, else the policies folder (the
/// estimates' for the cost model); each recipe but blockwise (the shipped policies' own) in its
/// own subfolder, TE's reports in theirs.
fn out_dirs(o: &GenOptions, chosen: &mut Chosen, estimated: bool, te: bool) -> (PathBuf, PathBuf) {
    let recipe = o.measure.recipe.recipe();
    let sub = |dir: PathBuf| {
        if recipe == fp8_bench::recipe::Recipe::Blockwise {
            dir
        } else {
            dir.join(recipe.name())
        }
    };
    let out = o.out.clone().unwrap_or_else(|| {
        sub(if estimated {
            o.policies_dir.join("estimated").join(&o.device_profile)
        } else {
            o.policies_dir.clone()
        })
    });
    let reports_dir = if estimated {
        out.join("reports")
    } else {
        let name = chosen.backend().device().name.to_lowercase();
        let slug = name.rsplit(' ').next().unwrap_or("gpu").to_owned();
        let dir = o.reports_base.join(slug);
        sub(if te { dir.join("te") } else { dir })
    };
    (out, reports_dir)
}

/// The whole job: sweep every layout of every model (each distinct shape once), merge, and
/// write policies, plots and summaries.
pub fn gen_policy(o: &GenOptions, progress: &dyn Progress) -> Result<GenOutcome, String> {
    if o.models.is_empty() {
        return Err("no model configs given".into());
    }
    let models = load_models(&o.models, o.config_root.as_deref(), o.component, progress)?;
    o.refuse_overwriting_configs(&models)?;
    let mut plans = Vec::new();
    for (config, model) in &models {
        let (tps, eps, etps) = (o.tp.as_deref(), o.ep.as_deref(), o.etp.as_deref());
        let layouts = default_layouts(model, tps, eps, etps);
        let left_out = layouts_left_out(model, tps, eps, etps);
        if layouts.is_empty() {
            return Err(no_layout(config, &left_out));
        }
        if let Some(n) = config_tp_note(model, tps) {
            progress.note(&format!("gen-policy: {n}"));
        }
        for n in &left_out {
            progress.note(&format!("gen-policy: {n}"));
        }
        plans.push(layouts);
    }
    let mut chosen = choose(
        &o.backend,
        &o.device_profile,
        &o.python,
        o.recompute,
        progress,
    )?;
    fp8_bench::recipe::check_device(o.measure.recipe.recipe(), &chosen.backend().device())?;
    if let Some(mix) = &o.recipes {
        crate::module_mix::check_numerics(o.measure.recipe.recipe(), mix)?;
        for &r in &mix.recipes {
            fp8_bench::recipe::check_device(r, &chosen.backend().device())?;
        }
    }
    let estimated = matches!(chosen, Chosen::Model(_));
    // TE reports keep their own folder (another objective's times); the policy made from them
    // is the default file, both executions folded (see `merged_files`).
    let te = matches!(chosen, Chosen::Te(_));
    let (out, reports_dir) = out_dirs(o, &mut chosen, estimated, te);
    let mut reports = Vec::new();
    for ((config, model), layouts) in models.iter().zip(&plans) {
        reports.extend(measure(
            chosen.backend(),
            config,
            model,
            layouts,
            &reports_dir,
            &o.measure,
            progress,
        )?);
        for &r in o.recipes.iter().flat_map(|m| &m.recipes) {
            let opts = MeasureOptions {
                recipe: fp8_bench::recipe::RecipeOptions::new(r, None, None, None)?,
                ..o.measure.clone()
            };
            progress.note(&format!(
                "gen-policy: {} in {r}, for the per-module recipe choice",
                model.name
            ));
            reports.extend(measure(
                chosen.backend(),
                config,
                model,
                layouts,
                &crate::module_mix::recipe_reports(&reports_dir, r),
                &opts,
                progress,
            )?);
        }
    }
    let configs: Vec<PathBuf> = models.iter().map(|(c, _)| c.clone()).collect();
    let (merge, host, mut notes) = resolve_host(o, &mut chosen, &reports_dir, progress);
    let o = GenOptions { merge, ..o.clone() };
    let mut files = merged_files(&configs, &o, &reports_dir, te, progress)?;
    if let Some(mix) = &o.recipes {
        let inputs = crate::module_mix::PlanInputs {
            configs: &configs,
            config_root: o.config_root.as_deref(),
            base: o.measure.recipe.recipe(),
            reports_dir: &reports_dir,
            merge: &o.merge,
            eager_known: eager_known(&o, te),
        };
        crate::module_mix::attach_plans(&mut files, &inputs, mix)?;
    }
    write_files(&out, &files)?;
    notes.extend(crate::build::earlier_notes(&reports_dir, &models, &reports));
    notes.extend(models.iter().flat_map(|(_, m)| m.notes.clone()));
    Ok(GenOutcome {
        estimated,
        reports,
        files: files.keys().map(|f| out.join(f)).collect(),
        out,
        notes,
        host,
    })
}

/// The merge settings with the eager source filled in where none was given
/// ([`crate::host`]): the TE backend times eager steps itself; otherwise a GPU with this package
/// and Transformer Engine importable measures its host (the probe, written beside the reports);
/// else the shipped profile of the same GPU, or of the cost model's device profile; else none
/// (`HostSource::Missing`, which callers warn of): the eager thresholds are then GPU time alone.
/// Returns the notes to print.
fn resolve_host(
    o: &GenOptions,
    chosen: &mut Chosen,
    reports_dir: &Path,
    progress: &dyn Progress,
) -> (MergeOptions, HostSource, Vec<String>) {
    let mut merge = o.merge.clone();
    let given = merge.host_profile.is_some() || merge.host_floor_ms.is_some();
    if matches!(chosen, Chosen::Te(_)) || merge.trainer.is_some() {
        return (merge, HostSource::NotNeeded, Vec::new());
    }
    if given {
        return (merge, HostSource::Given, Vec::new());
    }
    let device = match chosen {
        Chosen::Model(_) => o.device_profile.clone(),
        _ => chosen.backend().device().name,
    };
    let mut notes = Vec::new();
    if matches!(chosen, Chosen::Cuda(_)) && o.probe_host {
        let started = std::time::Instant::now();
        if crate::host::te_installed(&o.python) {
            let path = reports_dir.join("host").join("host_profile.json");
            let recipe = o.measure.recipe.recipe().name();
            match crate::host::probe(&o.python, recipe, &path, progress) {
                Ok(p) => {
                    notes.push(format!(
                        "eager thresholds (min_tokens) from the GPU times with this machine's \
                         host profile, measured in {:.1} s into {}",
                        started.elapsed().as_secs_f64(),
                        path.display()
                    ));
                    merge.host_profile = Some(p);
                    return (merge, HostSource::Probed(path), notes);
                }
                Err(e) => notes.push(format!("the host probe failed: {e}")),
            }
        } else {
            notes.push(format!(
                "`{}` has no adaptive_fp8, torch and transformer_engine installed, so this \
                 machine's host was not measured (pip install the package beside Transformer \
                 Engine, or pass --python)",
                o.python
            ));
        }
    }
    match crate::host::shipped_for(&device) {
        Some(p) => {
            notes.push(format!(
                "eager thresholds (min_tokens) from the GPU times with the shipped host profile \
                 of the {device} ({}); give this machine's with --host-profile FILE \
                 (python -m adaptive_fp8.bench.probe_host)",
                crate::host::H200_HOST_PROFILE
            ));
            merge.host_profile = Some(p);
            (
                merge,
                HostSource::Shipped(crate::host::H200_HOST_PROFILE),
                notes,
            )
        }
        None => {
            let why = format!(
                "no host profile for {device}: the eager thresholds (min_tokens) are GPU time \
                 alone (provenance eager_source: gpu_time), right for CUDA-graphed steps and too \
                 early for eager ones; give one with --host-profile FILE (python -m \
                 adaptive_fp8.bench.probe_host on that machine)"
            );
            (merge, HostSource::Missing(why), notes)
        }
    }
}

/// Whether the eager objective has a source: the TE backend's own eager times, or a host
/// profile or floors given.
fn eager_known(o: &GenOptions, te: bool) -> bool {
    te || o.merge.host_profile.is_some() || o.merge.host_floor_ms.is_some()
}

/// The policies, plots and summaries of the measured reports. Where the execution was not
/// chosen (`MergeOptions::trainer`), one file serves both: GPU time as `min_tokens_graphed` and
/// the eager objective as `min_tokens`, the TE backend's eager step times or the host profile
/// given; with neither, the GPU-time policy alone, and a note on how to get the eager one.
fn merged_files(
    configs: &[PathBuf],
    o: &GenOptions,
    reports_dir: &Path,
    te: bool,
    progress: &dyn Progress,
) -> Result<Files, String> {
    let root = o.config_root.as_deref();
    let only = o.component;
    if o.merge.trainer.is_some() {
        return crate::build::build_all_with(configs, root, only, reports_dir, &o.merge, progress);
    }
    // Without an eager source the eager policy is the GPU times as they are: both thresholds
    // are written, and provenance says the eager one is GPU time alone (`eager_source`).
    let [graphed, eager] = crate::module_mix::execution_objectives(&o.merge, eager_known(o, te));
    crate::fold::fold_files(
        &crate::build::build_all_with(configs, root, only, reports_dir, &graphed, progress)?,
        &crate::build::build_all_with(configs, root, only, reports_dir, &eager, progress)?,
        &Files::new(),
        &Files::new(),
    )
}

#[cfg(test)]
mod tests;
