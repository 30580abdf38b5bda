//! Where `fp8sel gen-policy` writes, and what it says when it is done: notes on stderr, the
//! files and the summary on stdout, or one JSON object (`--json`).

use std::path::PathBuf;

use fp8_pipeline::generate::GenOutcome;

use crate::error::{CliError, CliResult};

/// Refuses a folder flag (`(flag, value)`) that names a file.
pub fn folders(flags: &[(&str, &Option<PathBuf>)]) -> CliResult {
    for (flag, dir) in flags {
        if let Some(d) = dir.as_ref().filter(|d| d.exists() && !d.is_dir()) {
            return Err(CliError::input(format!(
                "{flag} {}: a file, not a folder; fix: name a folder (it is made where missing)",
                d.display()
            )));
        }
    }
    Ok(())
}

/// Where measured reports go: `--reports-dir`, else beside `--out`'s policies, else `reports`.
pub fn reports_base(reports_dir: &Option<PathBuf>, out: &Option<PathBuf>) -> PathBuf {
    match (reports_dir, out) {
        (Some(dir), _) => dir.clone(),
        (None, Some(out)) => out.join("reports"),
        (None, None) => PathBuf::from("reports"),
    }
}

/// What the job says when it is done: notes on stderr (none with `quiet`), the files and the
/// summary on stdout, or with `json` one JSON object.
pub fn report(quiet: bool, json: bool, done: &GenOutcome) {
    if !quiet {
        for n in &done.notes {
            eprintln!("note: {n}");
        }
    }
    if let fp8_pipeline::host::HostSource::Missing(why) = &done.host {
        eprintln!("warning: {why}");
    }
    if json {
        let mut warnings: Vec<String> = done.notes.iter().map(|n| format!("note: {n}")).collect();
        if let fp8_pipeline::host::HostSource::Missing(why) = &done.host {
            warnings.push(format!("warning: {why}"));
        }
        let out = serde_json::json!({
            "estimated": done.estimated, "out": done.out, "reports": done.reports, "files": done.files,
            "eager_source": eager_source(&done.host), "warnings": warnings,
        });
        println!("{out:#}");
        return;
    }
    if !quiet {
        for f in done.documents() {
            println!("wrote {}", f.display());
        }
    }
    println!("{}", done.summary());
}

/// Where the eager thresholds came from, in the JSON output's words.
fn eager_source(h: &fp8_pipeline::host::HostSource) -> String {
    use fp8_pipeline::host::HostSource;
    match h {
        HostSource::Given => "host profile given".to_owned(),
        HostSource::Probed(p) => format!("host profile measured here ({})", p.display()),
        HostSource::Shipped(p) => format!("shipped host profile ({p})"),
        HostSource::Missing(_) => "gpu_time".to_owned(),
        HostSource::NotNeeded => "the backend's own eager times".to_owned(),
    }
}
