//! Where `gen-policy`'s eager thresholds (`min_tokens`) come from when no host profile was
//! given: this machine's host measured by the probe, the shipped profile of the same GPU (or of
//! the cost model's device profile), or none, in which case the eager thresholds are GPU time
//! alone and the policy's provenance says so (`eager_source: gpu_time`).
//!
//! An eager step pays each module's host work (launches, and FP8's extra casts) as well as its
//! GPU time; below a few thousand tokens the host is the larger. GPU-time thresholds are right
//! for CUDA-graphed steps and too early for eager ones, which is Megatron's default.

use std::path::{Path, PathBuf};
use std::time::Duration;

use fp8_merge::host::HostProfile;

use crate::progress::Progress;
use crate::step::worker::{Clock, run_quiet};

/// The repository's path of the H200 host profile, as provenance names it.
pub const H200_HOST_PROFILE: &str = "fixtures/host/h200_te2.20.2_blockwise.json";

/// The H200 host profile (`python -m adaptive_fp8.bench.probe_host`, TE 2.20.2, blockwise),
/// built into the binary so an installed `fp8sel` has it.
const H200_HOST_PROFILE_TEXT: &str =
    include_str!("../../../fixtures/host/h200_te2.20.2_blockwise.json");

/// How long the package lookup and the probe may run.
const IMPORT_LIMIT: Duration = Duration::from_secs(180);
const PROBE_LIMIT: Duration = Duration::from_secs(600);

/// Where the eager thresholds of one `gen-policy` run come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostSource {
    /// Given by the caller (`--host-profile`).
    Given,
    /// Measured on this machine by the probe, written at this path beside the reports.
    Probed(PathBuf),
    /// The shipped profile of this GPU (or of the cost model's device profile).
    Shipped(&'static str),
    /// No profile: the eager thresholds are GPU time alone (why, in words).
    Missing(String),
    /// The backend times eager steps itself (TE), or the caller asked for one execution.
    NotNeeded,
}

/// The shipped host profile for a GPU name (`NVIDIA H200`) or a cost-model device profile
/// (`h200`), when there is one.
pub fn shipped_for(device: &str) -> Option<HostProfile> {
    let d = device.to_ascii_lowercase();
    let h200 = d == "h200" || d.contains("h200");
    if !h200 {
        return None;
    }
    let source = format!("{H200_HOST_PROFILE} (shipped)");
    HostProfile::parse(H200_HOST_PROFILE_TEXT, &source).ok()
}

/// The packages the step model's worker and the host probe import, looked up by [`te_installed`].
const STEP_PACKAGES: [&str; 3] = ["torch", "transformer_engine", "adaptive_fp8"];

/// True when `python` has torch, Transformer Engine and this package installed: found on its
/// path, not imported. An import of TE costs seconds (torch and TE's libraries load), which the
/// step model's worker and the probe pay once anyway; an install that is found and does not
/// import fails that worker's start, or the probe (which then falls back to the shipped profile
/// with a note), with its traceback.
pub fn te_installed(python: &str) -> bool {
    let names = STEP_PACKAGES.map(|m| format!("'{m}'")).join(", ");
    let args = [
        "-c".to_owned(),
        format!(
            "import importlib.util as u, sys; sys.exit(0 if all(u.find_spec(m) for m in ({names})) else 1)"
        ),
    ];
    matches!(
        run_quiet(python, &args, &Clock::start(Some(IMPORT_LIMIT)), true),
        Ok(true)
    )
}

/// Measures this machine's host profile with `python -m adaptive_fp8.bench.probe_host`, writes
/// it to `out` and reads it back.
pub fn probe(
    python: &str,
    recipe: &str,
    out: &Path,
    progress: &dyn Progress,
) -> Result<HostProfile, String> {
    fp8_io::create_parent_dir(out).map_err(|e| e.to_string())?;
    progress.note(&format!(
        "gen-policy: measuring this machine's host cost per module for the eager thresholds \
         (python -m adaptive_fp8.bench.probe_host, about 15 s) into {}",
        out.display()
    ));
    let args = [
        "-m".to_owned(),
        "adaptive_fp8.bench.probe_host".to_owned(),
        "--out".to_owned(),
        out.display().to_string(),
        "--recipe".to_owned(),
        recipe.to_owned(),
    ];
    match run_quiet(python, &args, &Clock::start(Some(PROBE_LIMIT)), false)? {
        true => {}
        false => {
            return Err(format!(
                "the host probe failed or ran past {} s: `{python} {}`; its messages are above. \
                 Fix: give a profile with --host-profile FILE",
                PROBE_LIMIT.as_secs(),
                args.join(" ")
            ));
        }
    }
    let text = fp8_io::read_to_string_limited(out, fp8_merge::host::MAX_HOST_PROFILE_BYTES)
        .map_err(|e| e.to_string())?;
    HostProfile::parse(&text, &out.display().to_string()).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_profile_is_the_h200s_and_only_its() {
        let p = shipped_for("NVIDIA H200").unwrap_or_else(|| panic!("the H200 has one"));
        assert!(p.source.contains(H200_HOST_PROFILE), "{}", p.source);
        assert!(shipped_for("h200").is_some());
        assert!(shipped_for("h100").is_none());
        assert!(shipped_for("NVIDIA B200").is_none());
    }

    #[test]
    fn a_python_without_the_package_has_none_installed() {
        assert!(!te_installed("/nonexistent/python3"));
    }

    /// A `python` whose path holds stand-ins for `names`: packages whose import fails.
    #[cfg(unix)]
    fn python_with(dir: &Path, names: &[&str]) -> String {
        use std::os::unix::fs::PermissionsExt;
        for n in names {
            let pkg = dir.join("site").join(n);
            std::fs::create_dir_all(&pkg).unwrap();
            std::fs::write(pkg.join("__init__.py"), "raise ImportError('imported')\n").unwrap();
        }
        let exe = dir.join("python");
        let script = format!(
            "#!/bin/sh\nPYTHONPATH={} exec python3 \"$@\"\n",
            dir.join("site").display()
        );
        std::fs::write(&exe, script).unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        exe.display().to_string()
    }

    #[cfg(unix)]
    #[test]
    fn the_step_packages_are_found_without_importing_them() {
        let dir = tempfile::tempdir().unwrap();
        let python = python_with(dir.path(), &STEP_PACKAGES);
        // Found, though importing any of them fails: the check imports nothing.
        assert!(te_installed(&python));
        let some = tempfile::tempdir().unwrap();
        let python = python_with(some.path(), &["adaptive_fp8", "torch"]);
        assert!(!te_installed(&python), "transformer_engine is missing");
    }
}
