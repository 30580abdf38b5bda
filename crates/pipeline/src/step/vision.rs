//! A VLM under the step model: the step model builds its language model (`<model>.llm.json`);
//! its vision encoder has no step of its own to model here, so it is timed per module (the
//! per-module `auto` backend, [`crate::generate::gen_policy`] on that component alone) into the
//! same folder (`<model>.vit.json`), and the summary holds both parts, the vision encoder's first.

use std::path::PathBuf;

use crate::generate::{GenOptions, GenOutcome, gen_policy};
use crate::progress::Progress;

/// Adds the vision encoder of every VLM among `o.models` to `done` (the step model's outcome):
/// its policy, plots and reports, its notes, and where its eager thresholds came from.
pub fn add_vision(
    o: &GenOptions,
    done: &mut GenOutcome,
    progress: &dyn Progress,
) -> Result<(), String> {
    let mut vlms = Vec::new();
    for config in &o.models {
        let model = crate::build::load_model(config, o.config_root.as_deref())?;
        if model.components.len() > 1 {
            vlms.push((config.clone(), model.name));
        }
    }
    if vlms.is_empty() {
        return Ok(());
    }
    // The language model's summary, as the step model wrote it, to follow the vision encoder's.
    let summaries: Vec<(PathBuf, Option<Vec<u8>>)> = vlms
        .iter()
        .map(|(_, name)| {
            let md = done.out.join(format!("{name}.md"));
            let text = std::fs::read(&md).ok();
            (md, text)
        })
        .collect();
    progress.note(&format!(
        "gen-policy: {} VLM(s): the vision encoder by per-module timing (the step model builds the language model)",
        vlms.len()
    ));
    let vision = GenOptions {
        models: vlms.iter().map(|(c, _)| c.clone()).collect(),
        component: Some(fp8_engine::Role::Vit),
        backend: "auto".to_owned(),
        out: Some(done.out.clone()),
        ..o.clone()
    };
    let v = gen_policy(&vision, progress)?;
    for (md, llm) in summaries {
        let Some(llm) = llm else { continue };
        let mut text = std::fs::read(&md).unwrap_or_default();
        if !text.is_empty() {
            text.extend_from_slice(b"\n");
        }
        text.extend_from_slice(&llm);
        fp8_io::write_atomic(&md, &text).map_err(|e| e.to_string())?;
    }
    for f in v.files {
        if !done.files.contains(&f) {
            done.files.push(f);
        }
    }
    done.reports.extend(v.reports);
    done.notes.extend(v.notes);
    done.host = v.host;
    done.estimated |= v.estimated;
    Ok(())
}
