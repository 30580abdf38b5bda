//! From reports to `policies/`: policies, plots and a summary per model. Pure: returns the files
//! it would write, so `--check` can compare them with what is committed.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use fp8_engine::{ModelDesc, Parallel, Role, TokenOverrides};
use fp8_merge::{Loaded, MergeOptions, ParKey, parse};
use fp8_policy::Policy;
use fp8_report::Report;

use crate::eval::{PointIndex, step_times};
use crate::plot::{Line, speedup_svg};

/// Files to write, relative to the output directory.
pub type Files = BTreeMap<PathBuf, Vec<u8>>;

/// What a run says of the reports in `dir` it did not make (`made`) but folds into each model's
/// policy with its own: an earlier run's layouts of the model (a line per model that has some).
pub fn earlier_notes(dir: &Path, models: &[(PathBuf, ModelDesc)], made: &[PathBuf]) -> Vec<String> {
    let same = |a: &Path| made.iter().any(|m| fp8_io::same_file(a, m));
    let reports = read_reports(dir).unwrap_or_default();
    models
        .iter()
        .filter_map(|(_, m)| {
            let earlier: Vec<String> = reports
                .iter()
                .filter(|(f, r, _)| r.provenance.model == m.name && !same(f))
                .map(|(f, _, _)| f.display().to_string())
                .collect();
            (!earlier.is_empty()).then(|| {
                format!(
                    "{}'s policy also folds in an earlier run's report(s) of it, beside this run's: {} (delete them to leave their layouts out)",
                    m.name,
                    earlier.join(", ")
                )
            })
        })
        .collect()
}

/// The reports of a directory (not recursive), sorted by file name, with their parsed content.
pub fn read_reports(dir: &Path) -> Result<Vec<(PathBuf, Report, Loaded)>, String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let text = fp8_report::read_text(&f).map_err(|e| e.to_string())?;
        if fp8_report::is_step_document(&text) {
            continue;
        }
        let report: Report = fp8_report::parse(&text, &f).map_err(|e| e.to_string())?;
        // Provenance names reports relative to the repository, whatever the checkout path.
        let name = PathBuf::from(rel_name(&f));
        let loaded = parse(&text, &name, 16).map_err(|e| e.to_string())?;
        out.push((f, report, loaded));
    }
    Ok(out)
}

fn rel_name(f: &Path) -> String {
    let parts: Vec<String> = f.iter().map(|c| c.to_string_lossy().into_owned()).collect();
    match parts
        .iter()
        .rposition(|p| p == "fixtures" || p == "policies" || p == "reports")
    {
        Some(i) => parts[i..].join("/"),
        None => f
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    }
}

/// Everything `build` produces for one model.
pub struct ModelOutput {
    /// Policies per component.
    pub policies: BTreeMap<Role, Policy>,
    /// Files to write.
    pub files: Files,
}

fn role(s: &str) -> Role {
    s.parse().unwrap_or(Role::Llm)
}

/// A model config, read as every command reads it.
pub fn load_model(config: &Path, root: Option<&Path>) -> Result<ModelDesc, String> {
    let opt = match root {
        Some(r) => fp8_engine::LoadOptions::with_config_root(r),
        None => fp8_engine::LoadOptions::default(),
    };
    fp8_engine::load_model_with(config, &opt).map_err(|e| e.to_string())
}

/// The models of `configs`, each with only `component` where one is named; what a config's
/// reader could not plan is said first (as `check` and `explain` say it), before the work.
pub(crate) fn load_models(
    configs: &[PathBuf],
    root: Option<&Path>,
    component: Option<Role>,
    progress: &dyn crate::progress::Progress,
) -> Result<Vec<(PathBuf, ModelDesc)>, String> {
    let mut models: Vec<(PathBuf, ModelDesc)> = configs
        .iter()
        .map(|c| load_model(c, root).map(|m| (c.clone(), m)))
        .collect::<Result<_, _>>()?;
    for (config, m) in &mut models {
        if let Some(role) = component {
            m.components.retain(|c| c.role == role);
            if m.components.is_empty() {
                return Err(format!(
                    "{}: the model has no {role} component",
                    config.display()
                ));
            }
        }
        for c in &m.components {
            for w in &c.warnings {
                progress.note(&format!("warning: {}: {}: {w}", m.name, c.role));
            }
        }
    }
    Ok(models)
}

/// A report's samples with their instance counts: reports written before points carried
/// `instances` get them from the model's inventory at the report's layout (the same numbers
/// the bench now records), so shared keys can be decided by the step.
pub fn with_instances(
    model: &ModelDesc,
    r: &(PathBuf, Report, Loaded),
) -> (PathBuf, Report, Loaded) {
    let mut r = r.clone();
    if r.2.samples.iter().all(|s| s.instances.is_some()) {
        return r;
    }
    let p = r.1.provenance.parallel;
    let par = fp8_engine::Parallel::new(p.tp.max(1), p.ep.max(1), p.etp.max(1), p.cp.max(1));
    let mut layers: std::collections::HashMap<(String, String), u64> =
        std::collections::HashMap::new();
    for c in &model.components {
        if let Ok(specs) = fp8_engine::inventory(c, par) {
            for m in specs {
                layers.insert((c.role.to_string(), m.name.clone()), m.layers);
            }
        }
    }
    for s in &mut r.2.samples {
        if s.instances.is_none() {
            let module = fp8_merge::module_of(&s.curve).0.to_owned();
            s.instances = layers.get(&(s.key.component.clone(), module)).copied();
        }
    }
    r
}

/// Builds policies, plots and the summary of one model from its reports.
pub fn build_model(
    model: &ModelDesc,
    reports: &[&(PathBuf, Report, Loaded)],
    opt: &MergeOptions,
) -> Result<ModelOutput, String> {
    let loaded: Vec<Loaded> = reports.iter().map(|r| with_instances(model, r).2).collect();
    let merged = fp8_merge::merge(&loaded, opt).map_err(|e| e.to_string())?;
    let mut files = Files::new();
    // A VLM's files are per component, also where its reports hold one component.
    let single = model.components.len() == 1;
    let mut policies = BTreeMap::new();
    for (comp, p) in &merged.policies {
        let name = if single {
            format!("{}.json", model.name)
        } else {
            format!("{}.{comp}.json", model.name)
        };
        files.insert(PathBuf::from(name), p.to_json().into_bytes());
        policies.insert(role(comp), p.clone());
    }
    // Plots: one per (component, kind, ub_name).
    let mut groups: BTreeMap<(String, String, String), Vec<Line>> = BTreeMap::new();
    let samples: Vec<&fp8_merge::Sample> = loaded.iter().flat_map(|l| &l.samples).collect();
    for o in &merged.outcomes {
        let k = &o.key;
        let mut curves: BTreeMap<&str, Vec<(u64, f64)>> = BTreeMap::new();
        let mut bands: BTreeMap<&str, Vec<(u64, f64, f64)>> = BTreeMap::new();
        for s in samples.iter().filter(|s| s.key == *k) {
            curves
                .entry(s.curve.as_str())
                .or_default()
                .push((s.tokens, s.bf16.median / s.fp8.median));
            if s.has_spread {
                bands.entry(s.curve.as_str()).or_default().push((
                    s.tokens,
                    s.bf16.p10 / s.fp8.p90,
                    s.bf16.p90 / s.fp8.p10,
                ));
            }
        }
        let par = match k.par {
            ParKey::Tp(tp) => format!("tp={tp}"),
            ParKey::Grouped(etp, g) => format!("etp={etp} gemms={g}"),
        };
        let ub = k.ub_name.clone().unwrap_or_else(|| "experts".into());
        let multi = curves.len() > 1;
        for (curve, mut pts) in curves {
            pts.sort_by_key(|p| p.0);
            let mut band = bands.remove(curve).unwrap_or_default();
            band.sort_by_key(|b| b.0);
            band.dedup_by_key(|b| b.0);
            // Several points at one count (duplicates) plot as their mean.
            let mut merged_pts: Vec<(u64, f64)> = Vec::new();
            for (t, s) in pts {
                match merged_pts.last_mut() {
                    Some(l) if l.0 == t => l.1 = (l.1 + s) / 2.0,
                    _ => merged_pts.push((t, s)),
                }
            }
            let short = curve
                .trim_start_matches("decoder.layers.")
                .trim_start_matches("image_encoder.layers.");
            let label = if multi {
                format!("{par} {short}")
            } else {
                par.clone()
            };
            groups
                .entry((k.component.clone(), k.kind.to_string(), ub.clone()))
                .or_default()
                .push(Line {
                    label,
                    points: merged_pts,
                    band,
                    min_tokens: o.rule.map(|r| r.0),
                });
        }
    }
    for ((comp, kind, ub), lines) in &groups {
        let title = format!("{} {comp}: {kind} / {ub}", model.name);
        let svg = speedup_svg(&title, opt.threshold, lines)?;
        files.insert(
            PathBuf::from(format!("plots/{}/{comp}-{kind}-{ub}.svg", model.name)),
            svg.into_bytes(),
        );
    }
    files.insert(
        PathBuf::from(format!("{}.md", model.name)),
        summary(model, reports, &merged, &policies, opt).into_bytes(),
    );
    Ok(ModelOutput { policies, files })
}

fn summary(
    model: &ModelDesc,
    reports: &[&(PathBuf, Report, Loaded)],
    merged: &fp8_merge::Merged,
    policies: &BTreeMap<Role, Policy>,
    opt: &MergeOptions,
) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# {}: adaptive FP8 policy\n", model.name);
    write_origin(&mut s, reports, opt);
    write_rules(&mut s, merged, opt);
    write_step_times(&mut s, model, reports, policies);
    if !merged.warnings.is_empty() {
        let _ = writeln!(s, "\n## Merge warnings\n");
        for w in &merged.warnings {
            let _ = writeln!(s, "- {w}");
        }
    }
    s
}

/// Where the policy came from: the device and backend, the objective, TP communication, the
/// recipe, the threshold and the reports.
fn write_origin(s: &mut String, reports: &[&(PathBuf, Report, Loaded)], opt: &MergeOptions) {
    let estimated = reports.iter().any(|r| r.1.estimated);
    let devices: BTreeSet<&str> = reports
        .iter()
        .map(|r| r.1.provenance.device.name.as_str())
        .collect();
    if estimated {
        let _ = writeln!(
            s,
            "> **ESTIMATED** by the cost model ({}), not measured. Re-run `fp8sel gen-policy` on a GPU before training with it.\n",
            devices.iter().copied().collect::<Vec<_>>().join(", ")
        );
    } else {
        let devices = devices.iter().copied().collect::<Vec<_>>().join(", ");
        let te = reports.iter().any(|r| r.1.provenance.timing == "te-eager");
        let _ = match (te, opt.trainer) {
            (false, _) if opt.host_profile.is_some() => writeln!(
                s,
                "Measured on {devices} with fp8sel's cuBLASLt backend (GPU time), each module's time raised to \
                 the host profile's floor ({}): max(GPU, host) models an eager trainer's step, so this is for \
                 an eager trainer (see docs/POLICY.md).\n",
                opt.host_profile.as_ref().map_or("", |h| h.source.as_str())
            ),
            (false, Some(fp8_policy::Execution::Graphed)) => writeln!(
                s,
                "Measured on {devices} with fp8sel's cuBLASLt backend (GPU time, CUDA events, median of the timed \
                 steps): the thresholds of CUDA-graphed steps (`min_tokens_graphed`). Where this file also \
                 carries eager ones, \"Thresholds by execution\" below names each key's source; where it \
                 does not, an eager trainer at short sequences pays host time GPU time does not see (`--backend \
                 te --trainer eager`).\n"
            ),
            (false, _) => writeln!(
                s,
                "Measured on {devices} with fp8sel's cuBLASLt backend (GPU time, CUDA events, median of the timed \
                 steps): for a CUDA-graphed trainer or long sequences. An eager trainer at short sequences \
                 pays host time this does not see; make its policy with `--backend te --trainer eager`.\n"
            ),
            (true, Some(fp8_policy::Execution::Graphed)) => writeln!(
                s,
                "Measured on {devices} through Transformer Engine (`--backend te`), thresholds on GPU time: \
                 for a CUDA-graphed trainer.\n"
            ),
            (true, _) => writeln!(
                s,
                "Measured on {devices} through Transformer Engine (`--backend te`), thresholds on the eager \
                 step time (host included): for an eager trainer.\n"
            ),
        };
        let comm: BTreeSet<u32> = reports
            .iter()
            .filter(|r| r.1.provenance.tp_comm)
            .map(|r| r.1.provenance.parallel.tp)
            .collect();
        if !comm.is_empty() {
            let list = comm
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ");
            let _ = writeln!(
                s,
                "TP {list}: measured over a real TP group with sequence parallelism (`adaptive_fp8.bench.te_tp`), \
                 so the all-gathers and reduce-scatters are in those rules' times; the other TP sizes are \
                 one rank's GEMMs alone.\n"
            );
        }
    }
    let recipes: BTreeSet<&str> = reports
        .iter()
        .map(|r| r.1.provenance.recipe.as_str())
        .collect();
    let te_classes: Vec<&str> = recipes
        .iter()
        .filter_map(|l| fp8_policy::Recipe::from_label(l).map(|r| r.te_class()))
        .collect();
    let _ = writeln!(
        s,
        "FP8 recipe: `{}` (TE `{}`): use this policy with a trainer that runs that recipe \
         (`fp8sel check --recipe` warns otherwise).\n",
        recipes.iter().copied().collect::<Vec<_>>().join("`, `"),
        te_classes.join("`, `")
    );
    let _ = writeln!(
        s,
        "Threshold {} + margin {}; generated by `fp8sel gen-policy` from:\n",
        opt.threshold, opt.margin
    );
    for r in reports {
        let _ = writeln!(s, "- `{}`", rel_name(&r.0));
    }
}

/// The rules table: every key and what it got.
fn write_rules(s: &mut String, merged: &fp8_merge::Merged, opt: &MergeOptions) {
    // The merge's own objective: in a file serving both executions this table is the graphed
    // merge's, and "Thresholds by execution" below has both fields.
    let threshold = match opt.trainer {
        Some(fp8_policy::Execution::Graphed) => "threshold (GPU time)",
        Some(fp8_policy::Execution::Eager) => "threshold (eager)",
        None => "min_tokens",
    };
    let estimated = merged.policies.values().any(Policy::estimated);
    let speedup = if estimated {
        "estimated speedup"
    } else {
        "measured speedup"
    };
    let _ = writeln!(
        s,
        "\n## Rules\n\n| component | kind | key | {threshold} | {speedup} |\n|---|---|---|---|---|"
    );
    for o in &merged.outcomes {
        let k = &o.key;
        let key = match (&k.ub_name, k.par) {
            (Some(ub), ParKey::Tp(tp)) => format!("{ub}, tp={tp}"),
            (None, ParKey::Tp(tp)) => format!("tp={tp}"),
            (_, ParKey::Grouped(etp, g)) => format!("etp={etp}, num_gemms={g}"),
        };
        match o.rule {
            Some((t, sp)) => {
                let _ = writeln!(
                    s,
                    "| {} | {} | {key} | {t} | {sp:.3} |",
                    k.component, k.kind
                );
            }
            None => {
                let _ = writeln!(
                    s,
                    "| {} | {} | {key} | no rule (BF16) | - |",
                    k.component, k.kind
                );
            }
        }
    }
}

/// The seed's section 4 for this model: the module set's step time per measured layout.
fn write_step_times(
    s: &mut String,
    model: &ModelDesc,
    reports: &[&(PathBuf, Report, Loaded)],
    policies: &BTreeMap<Role, Policy>,
) {
    let _ = writeln!(
        s,
        "\n## Step time of the module set (the seed's section 4, for this model)\n\n\
         Sum over every TE module and layer of fwd+bwd time at the configured run's token count, \
         per measured layout. Adaptive uses the policy above; these are the points the policy was \
         fitted on (held-out validation is in docs/RESULTS.md).\n\n\
         | layout | tokens | all-BF16 ms | all-FP8 ms | adaptive ms | adaptive / BF16 | adaptive / FP8 | FP8 modules |\n|---|---|---|---|---|---|---|---|"
    );
    // (tp, ep, etp, cp) -> (components measured, their points)
    type Layouts<'a> = BTreeMap<(u32, u32, u32, u32), (Vec<Role>, Vec<&'a fp8_report::Point>)>;
    let mut layouts: Layouts<'_> = BTreeMap::new();
    for r in reports {
        let p = r.1.provenance.parallel;
        let e = layouts.entry((p.tp, p.ep, p.etp, p.cp.max(1))).or_default();
        for pt in &r.1.points {
            let rl = role(&pt.component);
            if !e.0.contains(&rl) {
                e.0.push(rl);
            }
            e.1.push(pt);
        }
    }
    let first = model
        .component(Role::Llm)
        .or(model.components.first())
        .map(|c| c.role);
    for ((tp, ep, etp, cp), (roles, pts)) in &layouts {
        // The configured run's tokens per rank, CP included.
        let Some(tokens) = first
            .and_then(|r| model.token_config(r, &TokenOverrides::default(), *cp))
            .and_then(|t| t.dense_tokens().ok())
            .map(|(n, _)| n)
        else {
            let _ = writeln!(
                s,
                "| (none: the config names no seq_length, so no run to sum at) | | | | | | | |"
            );
            break;
        };
        let index = PointIndex::new(pts.iter().copied());
        let par = Parallel::new(*tp, *ep, *etp, *cp);
        let st = step_times(model, par, tokens, policies, &index, roles);
        if st.modules == 0 {
            continue;
        }
        let comps: Vec<String> = roles.iter().map(Role::to_string).collect();
        let _ = writeln!(
            s,
            "| tp{tp} ep{ep} etp{etp} ({}) | {tokens} | {:.2} | {:.2} | {:.2} | {:.3} | {:.3} | {} of {} |",
            comps.join("+"),
            st.bf16,
            st.fp8,
            st.adaptive,
            st.adaptive / st.bf16,
            st.adaptive / st.fp8,
            st.fp8_modules,
            st.modules
        );
    }
}

/// Builds every model's outputs from the reports in `reports_dir`; a model with no report there
/// is skipped, with a note to `progress`.
pub fn build_all(
    configs: &[PathBuf],
    reports_dir: &Path,
    opt: &MergeOptions,
    progress: &dyn crate::progress::Progress,
) -> Result<Files, String> {
    build_all_with(configs, None, None, reports_dir, opt, progress)
}

/// [`build_all`], with `defaults` bounded by `config_root`, and only `component`'s points where
/// one is named (a VLM's files keep their per-component names).
pub fn build_all_with(
    configs: &[PathBuf],
    config_root: Option<&Path>,
    component: Option<fp8_engine::Role>,
    reports_dir: &Path,
    opt: &MergeOptions,
    progress: &dyn crate::progress::Progress,
) -> Result<Files, String> {
    let mut reports = read_reports(reports_dir)?;
    if let Some(role) = component {
        let name = role.as_str();
        for (_, report, loaded) in &mut reports {
            report.points.retain(|p| p.component == name);
            loaded.samples.retain(|s| s.key.component == name);
        }
        reports.retain(|r| !r.1.points.is_empty());
    }
    let mut files = Files::new();
    for config in configs {
        let model = load_model(config, config_root)?;
        let mine: Vec<_> = reports
            .iter()
            .filter(|r| r.1.provenance.model == model.name)
            .collect();
        if mine.is_empty() {
            progress.note(&format!(
                "gen-policy: no reports for {} in {}; skipped",
                model.name,
                reports_dir.display()
            ));
            continue;
        }
        files.extend(build_model(&model, &mine, opt)?.files);
    }
    Ok(files)
}
