//! The recipes section of docs/RESULTS.md: where FP8 starts to pay in each recipe, per module
//! kind, from the H200 sweeps of the same layouts in blockwise (`reports/h200/`),
//! tensorwise and delayed scaling (`reports/h200/<recipe>/`), with one plot per module
//! (docs/plots/recipes/), and how the cuBLASLt backend's choices compare with TE's own in each
//! recipe (`reports/h200/te_recipes/`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use fp8_merge::{GroupKey, MergeOptions, ParKey, merge};
use fp8_report::Status;

use crate::build::{Files, read_reports};
use crate::plot::{Line, speedup_svg};

/// The recipes compared, with the folder of their reports under `reports/h200/`.
const RECIPES: [(&str, &str); 3] = [
    ("blockwise", ""),
    ("tensorwise", "tensorwise"),
    ("delayed", "delayed"),
];

/// The models every recipe was swept for.
const MODELS: [&str; 2] = ["qwen2_5_72b", "deepseek_v3"];

/// Layouts whose curves are plotted: one dense, one MoE.
const PLOTTED: [(&str, &str); 2] = [
    ("qwen2_5_72b", "_tp8.json"),
    ("deepseek_v3", "_tp8_ep64.json"),
];

/// A recipe's merge: key -> (min_tokens, speedup), and every sample's curve.
struct RecipeRun {
    rules: BTreeMap<GroupKey, Option<(u64, f64)>>,
    /// (file name, key, curve) -> (tokens, speedup) sorted.
    curves: BTreeMap<(String, GroupKey, String), Vec<(u64, f64)>>,
}

fn run_recipe(root: &Path, dir: &Path, model: &str) -> Result<RecipeRun, String> {
    let desc = fp8_engine::load_model(root.join(format!("fixtures/models/{model}.yaml")))
        .map_err(|e| e.to_string())?;
    let reports: Vec<_> = read_reports(dir)?
        .iter()
        .filter(|r| r.1.provenance.model == model)
        .map(|r| crate::build::with_instances(&desc, r))
        .collect();
    let loaded: Vec<_> = reports.iter().map(|r| r.2.clone()).collect();
    let merged = merge(&loaded, &MergeOptions::default()).map_err(|e| e.to_string())?;
    let rules = merged
        .outcomes
        .into_iter()
        .map(|o| (o.key, o.rule))
        .collect();
    let mut curves: BTreeMap<_, Vec<(u64, f64)>> = BTreeMap::new();
    for (path, _, l) in &reports {
        let file = path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        for s in &l.samples {
            curves
                .entry((file.clone(), s.key.clone(), s.curve.clone()))
                .or_default()
                .push((s.tokens, s.bf16.median / s.fp8.median));
        }
    }
    for v in curves.values_mut() {
        v.sort_by_key(|p| p.0);
    }
    Ok(RecipeRun { rules, curves })
}

fn key_label(k: &GroupKey) -> String {
    match (&k.ub_name, k.par) {
        (Some(ub), ParKey::Tp(tp)) => format!("{} {ub} tp={tp}", k.kind),
        (None, ParKey::Tp(tp)) => format!("{} tp={tp}", k.kind),
        (_, ParKey::Grouped(etp, g)) => format!("{} etp={etp} num_gemms={g}", k.kind),
    }
}

/// One row per key kind and module, its TP sizes in one cell each (`a / b / ...`, in the order
/// the key column names them); grouped keys one row each.
fn write_key_rows(runs: &Runs<'_>, model: &str, keys: &BTreeSet<&GroupKey>, s: &mut String) {
    let mut rows: Vec<(String, Vec<String>, Vec<&GroupKey>)> = Vec::new();
    for &k in keys {
        let label = key_label(k);
        let (base, tp) = match label.rsplit_once(" tp=") {
            Some((b, tp)) if matches!(k.par, ParKey::Tp(_)) => (b.to_owned(), Some(tp.to_owned())),
            _ => (label, None),
        };
        match rows.last_mut() {
            Some((b, tps, ks)) if *b == base && tp.is_some() && !tps.is_empty() => {
                tps.extend(tp);
                ks.push(k);
            }
            _ => rows.push((base, tp.into_iter().collect(), vec![k])),
        }
    }
    for (base, tps, ks) in rows {
        let cell = |r: &str| {
            ks.iter()
                .map(|k| rule_cell(runs[&(model, r)].rules.get(*k)))
                .collect::<Vec<_>>()
                .join(" / ")
        };
        let name = if tps.is_empty() {
            base
        } else {
            format!("{base} tp={}", tps.join("/"))
        };
        let _ = writeln!(
            s,
            "| {name} | {} | {} | {} |",
            cell("blockwise"),
            cell("tensorwise"),
            cell("delayed")
        );
    }
}

fn rule_cell(r: Option<&Option<(u64, f64)>>) -> String {
    match r {
        Some(Some((t, _))) => t.to_string(),
        Some(None) => "BF16".into(),
        None => "-".into(),
    }
}

/// Where the plots go, relative to the repository root.
pub const PLOT_DIR: &str = "docs/plots/recipes";

/// Renders the section and its plots (paths relative to [`PLOT_DIR`]).
pub fn render(root: &Path) -> Result<(String, Files), String> {
    let h200 = root.join("reports/h200");
    let mut s = String::new();
    let mut files = Files::new();
    let _ = writeln!(
        s,
        "## Recipes: where FP8 starts to pay, per module kind\n\n\
         The same layouts swept in each recipe on the same H200 with fp8sel's cuBLASLt backend: \
         blockwise (TE `Float8BlockScaling`, the sweeps above), tensorwise (`Float8CurrentScaling`, \
         E4M3: zero the amax, an amax pass, a scale kernel, then the cast with its transpose) and \
         delayed (`DelayedScaling`, HYBRID, 1024-step history, `max`: one cast that records the \
         amax, and a history update per direction). Commands: `RECIPE=tensorwise bash \
         scripts/device/recipes.sh sweep`, `RECIPE=delayed ...` (Qwen2.5-72B TP 1-8 at powers of \
         two; DeepSeek-V3 (TP, EP) = (1, 8) (2, 16) (4, 32) (8, 64), two points per doubling); \
         policies in `policies/tensorwise/` and `policies/delayed/`. Each cell is the rule's \
         `min_tokens` (BF16: FP8 never won with the margin).\n"
    );
    let mut runs: BTreeMap<(&str, &str), RecipeRun> = BTreeMap::new();
    for model in MODELS {
        for (recipe, sub) in RECIPES {
            let dir = if sub.is_empty() {
                h200.clone()
            } else {
                h200.join(sub)
            };
            runs.insert((model, recipe), run_recipe(root, &dir, model)?);
        }
    }
    write_thresholds(&runs, &mut s);
    write_curves(&runs, &mut s, &mut files)?;
    s.push('\n');
    te_agreement(root, &mut s)?;
    Ok((s, files))
}

type Runs<'a> = BTreeMap<(&'a str, &'a str), RecipeRun>;

/// Per model, every key's threshold in each recipe, and the comparison in words.
fn write_thresholds(runs: &Runs<'_>, s: &mut String) {
    // Per model: every key with the three thresholds.
    let mut lower = [0usize; 2];
    let mut higher = [0usize; 2];
    let mut same = [0usize; 2];
    // Tensorwise against delayed: the same GEMMs, so the difference is current scaling's extra
    // amax pass and kernels.
    let (mut tw_later, mut tw_compared) = (0usize, 0usize);
    for model in MODELS {
        let _ = writeln!(
            s,
            "### {model}\n\n| key | blockwise | tensorwise | delayed |\n|---|---|---|---|"
        );
        let keys: BTreeSet<&GroupKey> = RECIPES
            .iter()
            .flat_map(|(r, _)| runs[&(model, *r)].rules.keys())
            .collect();
        for k in &keys {
            let t = |r: &str| match runs[&(model, r)].rules.get(k) {
                Some(Some((t, _))) => Some(*t),
                Some(None) => Some(u64::MAX),
                None => None,
            };
            if let (Some(tw), Some(d)) = (t("tensorwise"), t("delayed")) {
                tw_compared += 1;
                tw_later += usize::from(tw > d);
            }
            if let Some(b) = t("blockwise") {
                for (i, r) in ["tensorwise", "delayed"].iter().enumerate() {
                    match t(r) {
                        Some(x) if x < b => lower[i] += 1,
                        Some(x) if x > b => higher[i] += 1,
                        Some(_) => same[i] += 1,
                        None => {}
                    }
                }
            }
        }
        write_key_rows(runs, model, &keys, s);
        s.push('\n');
    }
    let _ = writeln!(
        s,
        "Against blockwise, over the keys of both models: tensorwise starts FP8 at a lower token \
         count for {} keys, the same for {}, a higher one for {}; delayed lower for {}, the same \
         for {}, higher for {}. Both per-tensor recipes run the faster per-tensor GEMMs \
         (docs/device-logs/recipes/kernels.txt, on the 14 anchor shapes: 0.99-1.32x the \
         blockwise GEMM with split accumulation as dgrad and wgrad run, 1.02-1.60x with the fast \
         accumulation of TE's fprop), which moves the expert modules' crossovers the most. Tensorwise and delayed share \
         those GEMMs; what separates them is current scaling's extra read of every activation and \
         gradient and its two small kernels: tensorwise starts later than delayed for {tw_later} of \
         {tw_compared} keys, mostly DeepSeek-V3's MLA projections and shared-expert FC1/FC2 at \
         TP 2-8, whose GEMMs are short next to their casts. A blockwise policy is therefore wrong for \
         a per-tensor trainer in the safe direction only: it leaves FP8 off where the trainer's \
         recipe would win.\n",
        lower[0], same[0], higher[0], lower[1], same[1], higher[1]
    );
}

/// One plot per module of the plotted layouts, the three recipes' curves on it.
fn write_curves(runs: &Runs<'_>, s: &mut String, files: &mut Files) -> Result<(), String> {
    // Plots: one per module of the plotted layouts, the three recipes' curves on it.
    let _ = write!(
        s,
        "### Curves\n\nEach recipe's speedup against tokens, per module:"
    );
    let mut sep = " ";
    for (model, file_suffix) in PLOTTED {
        let file = format!("{model}{file_suffix}");
        let mut by_module: BTreeMap<(GroupKey, String), Vec<Line>> = BTreeMap::new();
        for (recipe, _) in RECIPES {
            let run = &runs[&(model, recipe)];
            for ((f, key, curve), pts) in &run.curves {
                if *f != file || curve.contains("zipf") {
                    continue;
                }
                let module = curve.split(" [").next().unwrap_or(curve).to_owned();
                by_module
                    .entry((key.clone(), module))
                    .or_default()
                    .push(Line {
                        label: recipe.to_owned(),
                        points: pts.clone(),
                        band: Vec::new(),
                        min_tokens: run.rules.get(key).copied().flatten().map(|r| r.0),
                    });
            }
        }
        for ((key, module), lines) in by_module {
            let short = module.rsplit('.').take(2).collect::<Vec<_>>();
            let short: Vec<&str> = short.into_iter().rev().collect();
            let name = format!("{model}_{}_{}", key.kind, short.join("_"))
                .replace(|c: char| !c.is_ascii_alphanumeric() && c != '_', "_");
            let rel = PathBuf::from(format!("{name}.svg"));
            let title = format!(
                "{model} {} {} ({})",
                file_suffix
                    .trim_end_matches(".json")
                    .trim_start_matches('_'),
                short.join("."),
                key.kind
            );
            files.insert(rel.clone(), speedup_svg(&title, 1.0, &lines)?.into_bytes());
            let _ = write!(s, "{sep}[{title}](plots/recipes/{name}.svg)");
            sep = ", ";
        }
    }
    let _ = writeln!(s, ".");
    Ok(())
}

/// How often the cuBLASLt backend's FP8-or-BF16 answer matches TE's, per recipe and layout, on
/// the points both measured: against TE's GPU time (a graphed trainer) and its eager step.
fn te_agreement(root: &Path, s: &mut String) -> Result<(), String> {
    let h200 = root.join("reports/h200");
    let mut te = read_reports(&h200.join("te"))?;
    te.extend(read_reports(&h200.join("te_recipes"))?);
    let _ = writeln!(
        s,
        "### The cuBLASLt backend against TE, per recipe\n\n\
         TE 2.20.2 through `fp8sel bench --backend te --recipe R` (blockwise: \
         `bash scripts/device/te_backend.sh`, reports in `reports/h200/te/`; every recipe: \
         `bash scripts/device/te_recipes.sh`, reports in `reports/h200/te_recipes/`; both \
         after the TE install), against the cuBLASLt backend's sweep of the same layout and recipe. \
         A point agrees when both backends put the speedup on the same side of 1.0. Reports with \
         activation recompute are left out (the cuBLASLt backend does not model it).\n\n\
         | recipe | TE report | points | agree with TE GPU time | agree with TE eager step | median speedup, ours | median, TE GPU | median, TE eager |\n\
         |---|---|---|---|---|---|---|---|"
    );
    let mut rows = Vec::new();
    for (path, theirs, _) in te.iter().filter(|r| !r.1.provenance.recompute) {
        let Some(recipe) = fp8_policy::Recipe::from_label(&theirs.provenance.recipe) else {
            continue;
        };
        let Some((_, sub)) = RECIPES.iter().find(|(r, _)| *r == recipe.name()) else {
            continue;
        };
        let dir = if sub.is_empty() {
            h200.clone()
        } else {
            h200.join(sub)
        };
        let par = theirs.provenance.parallel;
        let name = if par.ep > 1 {
            format!("{}_tp{}_ep{}.json", theirs.provenance.model, par.tp, par.ep)
        } else {
            format!("{}_tp{}.json", theirs.provenance.model, par.tp)
        };
        let ours: Vec<_> = read_reports(&dir)?
            .into_iter()
            .filter(|r| r.0.ends_with(&name))
            .collect();
        let mut n = 0;
        let (mut agree_gpu, mut agree_eager) = (0, 0);
        let (mut so, mut sg, mut se) = (Vec::new(), Vec::new(), Vec::new());
        for o in ours
            .iter()
            .flat_map(|r| &r.1.points)
            .filter(|p| p.status == Status::Ok)
        {
            let Some(t) = theirs.points.iter().find(|p| {
                p.status == Status::Ok
                    && p.module == o.module
                    && p.tokens == o.tokens
                    && p.split_mode == o.split_mode
            }) else {
                continue;
            };
            let (Some(our), Some(eager)) = (o.speedup, t.speedup) else {
                continue;
            };
            let gpu = match (
                t.bf16.and_then(|b| b.gpu_total_ms),
                t.fp8.and_then(|f| f.gpu_total_ms),
            ) {
                (Some(b), Some(f)) => b.median / f.median,
                _ => continue,
            };
            n += 1;
            agree_gpu += usize::from((our > 1.0) == (gpu > 1.0));
            agree_eager += usize::from((our > 1.0) == (eager > 1.0));
            so.push(our);
            sg.push(gpu);
            se.push(eager);
        }
        if n == 0 {
            continue;
        }
        let med = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let file = path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        rows.push((
            recipe,
            file.clone(),
            format!(
                "| {recipe} | `{file}` | {n} | {agree_gpu} ({:.0}%) | {agree_eager} ({:.0}%) | {:.3} | {:.3} | {:.3} |",
                100.0 * agree_gpu as f64 / n as f64,
                100.0 * agree_eager as f64 / n as f64,
                med(so),
                med(sg),
                med(se)
            ),
        ));
    }
    rows.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    for (_, _, row) in rows {
        let _ = writeln!(s, "{row}");
    }
    let _ = writeln!(
        s,
        "\nThe cuBLASLt backend answers for a trainer that keeps the GPU fed (CUDA graphs, long \
         sequences); an eager trainer at short sequences should make its policy with `--backend te \
         --trainer eager` in its recipe (`fp8sel gen-policy --backend te --recipe R`).\n"
    );
    Ok(())
}
