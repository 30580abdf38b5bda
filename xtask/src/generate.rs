//! `cargo xtask gen-policy`: measure (or estimate) every layout of every model, then build.

use std::path::{Path, PathBuf};

use fp8_bench::cuda::MeasureOptions;
use fp8_bench::driver;
use fp8_bench::job::{SweepJob, points, provenance};
use fp8_bench::runner::{Backend, CudaBackend};
use fp8_bench::sweep::BenchPoint;
use fp8_bench::sweep::SplitMode;
use fp8_engine::{ModelDesc, Parallel, inventory, load_model};
use fp8_merge::MergeOptions;
use fp8_report::Point;
use indicatif::{ProgressBar, ProgressStyle};

use crate::build::{Files, build_model, read_reports};

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

/// Default layouts: TP 1, 2, 4, 8 (those that divide the model), crossed with the config's EP for
/// MoE models (8 when it names none), ETP 1 for experts.
pub fn default_layouts(
    model: &ModelDesc,
    tps: Option<&[u32]>,
    eps: Option<&[u32]>,
    etps: Option<&[u32]>,
) -> Vec<Parallel> {
    let moe = model.components.iter().any(|c| c.arch.moe.is_some());
    let rec_ep = model
        .components
        .iter()
        .find_map(|c| c.recommended.ep)
        .unwrap_or(8);
    let tps = tps.map_or_else(|| vec![1, 2, 4, 8], <[u32]>::to_vec);
    let eps = eps.map_or_else(|| if moe { vec![rec_ep] } else { vec![1] }, <[u32]>::to_vec);
    let etps = etps.map_or_else(|| vec![1], <[u32]>::to_vec);
    let mut out = Vec::new();
    for &tp in &tps {
        for &ep in &eps {
            for &etp in &etps {
                let p = Parallel::new(tp, ep, etp, 1);
                if model.components.iter().all(|c| inventory(c, p).is_ok()) {
                    out.push(p);
                }
            }
        }
    }
    out
}

/// Which backend a run uses.
pub enum Chosen {
    /// The GPU.
    Cuda(Box<CudaBackend>),
    /// The cost model.
    Model(fp8_bench::costmodel::ModelBackend),
}

impl Chosen {
    /// The backend.
    pub fn backend(&mut self) -> &mut dyn Backend {
        match self {
            Chosen::Cuda(c) => c.as_mut(),
            Chosen::Model(m) => m,
        }
    }
}

/// Picks the backend: `auto` is the GPU when one opens, else the cost model.
pub fn choose(kind: &str, profile: &str) -> Result<Chosen, String> {
    let model = || {
        fp8_bench::costmodel::profile(profile)
            .map(|p| Chosen::Model(fp8_bench::costmodel::ModelBackend(p)))
            .ok_or_else(|| format!("unknown --device-profile {profile} (h200, h100, b200)"))
    };
    match kind {
        "model" => model(),
        "cuda" => fp8_bench::cuda::Gpu::open(0)
            .map(|g| Chosen::Cuda(Box::new(CudaBackend(g))))
            .map_err(|e| e.to_string()),
        "auto" => match fp8_bench::cuda::Gpu::open(0) {
            Ok(g) => Ok(Chosen::Cuda(Box::new(CudaBackend(g)))),
            Err(e) => {
                eprintln!("gen-policy: no usable GPU ({e}); falling back to the cost model");
                model()
            }
        },
        other => Err(format!("unknown --backend {other} (auto, cuda, model)")),
    }
}

/// Runs every layout of `model` and writes one report per layout into `reports_dir`.
pub fn measure(
    backend: &mut dyn Backend,
    config: &Path,
    model: &ModelDesc,
    layouts: &[Parallel],
    reports_dir: &Path,
    opt: &MeasureOptions,
) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(reports_dir).map_err(|e| format!("{}: {e}", reports_dir.display()))?;
    let mut written = Vec::new();
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
        let bar = ProgressBar::new(pts.len() as u64);
        bar.set_style(
            ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar.set_prefix(format!("{} {parallel}", model.name));
        let prov = provenance(model, &config.display().to_string(), &job, opt, "pow2");
        let report = driver::run(
            driver::Sweep {
                points: &pts,
                opt,
                provenance: prov,
                rank: None,
                resume_from: None,
            },
            driver::Workers::One(&mut *backend),
            &Bar(&bar),
        )
        .map_err(|e| e.to_string())?;
        bar.finish_and_clear();
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

/// The sweep's progress on an indicatif bar.
struct Bar<'a>(&'a ProgressBar);

impl driver::Progress for Bar<'_> {
    fn point(&self, p: &BenchPoint, _: &Point) {
        self.0
            .set_message(p.spec.name.rsplit('.').next().unwrap_or("").to_owned());
        self.0.inc(1);
    }
}

/// Builds every model's outputs from the reports in `reports_dir`.
pub fn build_all(
    configs: &[PathBuf],
    reports_dir: &Path,
    opt: &MergeOptions,
) -> Result<Files, String> {
    let reports = read_reports(reports_dir)?;
    let mut files = Files::new();
    for config in configs {
        let model = load_model(config).map_err(|e| e.to_string())?;
        let mine: Vec<_> = reports
            .iter()
            .filter(|r| r.1.provenance.model == model.name)
            .collect();
        if mine.is_empty() {
            eprintln!(
                "gen-policy: no reports for {} in {}; skipped",
                model.name,
                reports_dir.display()
            );
            continue;
        }
        files.extend(build_model(&model, &mine, opt)?.files);
    }
    Ok(files)
}

/// Writes files under `out`, atomically each.
pub fn write_files(out: &Path, files: &Files) -> Result<(), String> {
    for (rel, bytes) in files {
        let path = out.join(rel);
        fp8_io::create_parent_dir(&path).map_err(|e| e.to_string())?;
        fp8_io::write_atomic(&path, bytes).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Files under `out` that differ from `files` (or are missing, or are generated files no longer
/// produced).
pub fn stale(out: &Path, files: &Files) -> Vec<String> {
    let mut bad = Vec::new();
    for (rel, bytes) in files {
        match std::fs::read(out.join(rel)) {
            Ok(have) if have == *bytes => {}
            Ok(_) => bad.push(format!("{} differs", rel.display())),
            Err(_) => bad.push(format!("{} is missing", rel.display())),
        }
    }
    let produced: std::collections::BTreeSet<&PathBuf> = files.keys().collect();
    for entry in walk(out) {
        let rel = entry
            .strip_prefix(out)
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let generated = rel
            .extension()
            .is_some_and(|e| e == "json" || e == "md" || e == "svg");
        if generated && !rel.starts_with("estimated") && !produced.contains(&rel) {
            bad.push(format!("{} is no longer generated", rel.display()));
        }
    }
    bad
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.filter_map(Result::ok) {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p))
            } else {
                out.push(p)
            }
        }
    }
    out
}
