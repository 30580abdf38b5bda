//! Reports merged into policies and the policies written: what `fp8sel merge-policy` and
//! `fp8sel bench --policy-out` both do, in one place.
//!
//! Architecture invariant: no flag names here; the errors say what is wrong in these terms and
//! the CLI maps them to its flags.

use std::fmt;
use std::path::{Path, PathBuf};

use fp8_merge::{Loaded, MergeError, MergeOptions, Merged, load, merge};
use fp8_policy::{Execution, Policy, PolicyError};

/// Loads every report and merges them.
pub fn merge_reports(
    reports: &[PathBuf],
    opt: &MergeOptions,
    pad: u64,
) -> Result<(Vec<Loaded>, Merged), MergeError> {
    let loaded: Vec<Loaded> = reports
        .iter()
        .map(|p| load(p, pad))
        .collect::<Result<_, _>>()?;
    let merged = merge(&loaded, opt)?;
    Ok((loaded, merged))
}

/// What [`merge_both`] can fail on: the merge, or folding its two halves.
#[derive(Debug)]
#[non_exhaustive]
pub enum BothError {
    /// One of the two merges.
    Merge(MergeError),
    /// The eager and graphed policies do not fold into one.
    Fold(PolicyError),
}

impl fmt::Display for BothError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BothError::Merge(e) => e.fmt(f),
            BothError::Fold(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for BothError {}

/// Both executions: the eager merge (with the host profile, if any) and the graphed merge (GPU
/// time) folded into one policy per component; the summary and outcomes are the eager merge's.
pub fn merge_both(
    reports: &[PathBuf],
    opt: MergeOptions,
    pad: u64,
) -> Result<(Vec<Loaded>, Merged), BothError> {
    let graphed_opt = MergeOptions {
        trainer: Some(Execution::Graphed),
        host_profile: None,
        host_floor_ms: None,
        ..opt.clone()
    };
    let eager_opt = MergeOptions {
        trainer: Some(Execution::Eager),
        ..opt
    };
    let (loaded, mut eager) = merge_reports(reports, &eager_opt, pad).map_err(BothError::Merge)?;
    let (_, graphed) = merge_reports(reports, &graphed_opt, pad).map_err(BothError::Merge)?;
    for (component, p) in &mut eager.policies {
        if let Some(g) = graphed.policies.get(component) {
            *p = fp8_merge::fold::fold_pair(p, g).map_err(BothError::Fold)?;
        }
    }
    eager.warnings.extend(
        graphed
            .warnings
            .into_iter()
            .map(|w| format!("graphed: {w}")),
    );
    Ok((loaded, eager))
}

/// Where the merged policies go.
#[derive(Debug, Clone)]
pub enum Destination {
    /// One file: the merge must hold one component.
    File(PathBuf),
    /// A folder: `<name>.json`, or `<name>.<component>.json` for each component of a VLM.
    Dir {
        /// The folder.
        dir: PathBuf,
        /// The files' base name.
        name: String,
    },
}

impl Destination {
    /// `out` when the merge holds one component; for a VLM, `<out's stem>.<component>.json`
    /// beside it (`fallback` names them when `out` has no stem).
    pub fn beside(out: &Path, merged: &Merged, fallback: &str) -> Destination {
        if merged.policies.len() <= 1 {
            return Destination::File(out.to_path_buf());
        }
        Destination::Dir {
            dir: out.parent().unwrap_or(Path::new(".")).to_path_buf(),
            name: out
                .file_stem()
                .map_or_else(|| fallback.to_owned(), |s| s.to_string_lossy().into_owned()),
        }
    }
}

/// What writing the policies can fail on.
#[derive(Debug)]
#[non_exhaustive]
pub enum OutputError {
    /// One file was asked for, and the merge holds several components (named here).
    SeveralComponents(Vec<String>),
    /// An output is one of the inputs, or another output; nothing was written.
    Overwrite(fp8_io::Error),
    /// The output's folder could not be made.
    Folder(fp8_io::Error),
    /// A policy could not be written.
    Write(PolicyError),
}

impl fmt::Display for OutputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OutputError::SeveralComponents(c) => write!(
                f,
                "the reports hold {} components ({}); a VLM gets one policy per component",
                c.len(),
                c.join(", ")
            ),
            OutputError::Overwrite(e) | OutputError::Folder(e) => e.fmt(f),
            OutputError::Write(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for OutputError {}

/// Each policy's file.
pub fn output_paths<'m>(
    merged: &'m Merged,
    dest: &Destination,
) -> Result<Vec<(PathBuf, &'m Policy)>, OutputError> {
    match dest {
        Destination::File(out) => {
            if merged.policies.len() > 1 {
                return Err(OutputError::SeveralComponents(
                    merged.policies.keys().cloned().collect(),
                ));
            }
            Ok(merged
                .policies
                .values()
                .next()
                .map(|p| (out.to_path_buf(), p))
                .into_iter()
                .collect())
        }
        Destination::Dir { dir, name } => {
            let single = merged.policies.len() == 1;
            Ok(merged
                .policies
                .iter()
                .map(|(comp, p)| {
                    let file = if single {
                        format!("{name}.json")
                    } else {
                        format!("{name}.{comp}.json")
                    };
                    (dir.join(file), p)
                })
                .collect())
        }
    }
}

/// Writes the merged policies to `dest`; returns the written paths. Refuses, before writing
/// anything, an output that is one of `inputs` or another output.
pub fn write_policies(
    merged: &Merged,
    dest: &Destination,
    inputs: &[&Path],
) -> Result<Vec<PathBuf>, OutputError> {
    let targets = output_paths(merged, dest)?;
    for (i, t) in targets.iter().enumerate() {
        let earlier = targets[..i].iter().map(|(p, _)| p.as_path());
        fp8_io::refuse_same_file(t.0.as_path(), inputs.iter().copied().chain(earlier))
            .map_err(OutputError::Overwrite)?;
    }
    let mut written = Vec::new();
    for (path, policy) in targets {
        fp8_io::create_parent_dir(&path).map_err(OutputError::Folder)?;
        policy.write(&path).map_err(OutputError::Write)?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn merged(components: &[&str]) -> Merged {
        let policies: BTreeMap<String, Policy> = components
            .iter()
            .map(|c| {
                (
                    (*c).to_owned(),
                    Policy::new(1.0).expect("a valid threshold"),
                )
            })
            .collect();
        Merged {
            policies,
            outcomes: Vec::new(),
            warnings: Vec::new(),
        }
    }

    #[test]
    fn one_component_goes_to_the_file_and_a_vlm_beside_it() {
        let out = Path::new("pol/my_model.json");
        let one = merged(&["llm"]);
        let paths = output_paths(&one, &Destination::beside(out, &one, "m")).unwrap();
        assert_eq!(paths.len(), 1);
        assert_eq!(paths[0].0, out);
        let vlm = merged(&["llm", "vit"]);
        let dest = Destination::beside(out, &vlm, "m");
        let names: Vec<PathBuf> = output_paths(&vlm, &dest)
            .unwrap()
            .into_iter()
            .map(|(p, _)| p)
            .collect();
        assert_eq!(
            names,
            [
                PathBuf::from("pol/my_model.llm.json"),
                PathBuf::from("pol/my_model.vit.json")
            ]
        );
        // One file asked for, two components merged: refused with both named.
        let err = output_paths(&vlm, &Destination::File(out.to_path_buf())).unwrap_err();
        assert!(matches!(&err, OutputError::SeveralComponents(c) if c == &["llm", "vit"]));
        assert!(err.to_string().contains("2 components (llm, vit)"));
    }

    #[test]
    fn an_output_that_is_an_input_is_refused_before_anything_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("m.vit.json");
        std::fs::write(&input, "report").unwrap();
        let dest = Destination::Dir {
            dir: dir.path().to_path_buf(),
            name: "m".into(),
        };
        let err = write_policies(&merged(&["llm", "vit"]), &dest, &[input.as_path()]).unwrap_err();
        assert!(matches!(err, OutputError::Overwrite(_)), "{err}");
        // Not even the first policy (m.llm.json, before the clash) was written.
        assert!(!dir.path().join("m.llm.json").exists());
        assert_eq!(std::fs::read_to_string(&input).unwrap(), "report");
        let written = write_policies(&merged(&["llm"]), &dest, &[input.as_path()]).unwrap();
        assert_eq!(written, [dir.path().join("m.json")]);
        assert!(Policy::load(&written[0]).is_ok());
    }
}
