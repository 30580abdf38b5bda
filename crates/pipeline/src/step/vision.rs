//! A VLM under the step model: the step model builds its language model (`<model>.llm.json`),
//! then its vision encoder (`<model>.vit.json`) the same way, from steps of the vision encoder's
//! own layers (`--component vit`: bidirectional attention and a dense MLP, its counts image
//! tokens) in the TE blocks, into the same folder; the summary holds both parts, the vision
//! encoder's first.
//!
//! What this is not: a step of the whole VLM. The vision encoder's layers and the language
//! model's are timed apart (each one's common part calibrated on its own steps), as a trainer
//! runs them one after the other; the Megatron judge builds `GPTModel`'s language model only, so
//! the vision encoder is checked in the TE blocks.

use std::path::PathBuf;

use crate::generate::{GenOptions, GenOutcome};

use super::StepJob;

/// Adds the vision encoder of every VLM among `o.models` to `done` (the language model's
/// outcome, begun at `started`): its policy, summary, plots and reports, and its notes. It gets
/// what `job`'s time limit left it; none left, it is not measured (said).
pub fn add_vision(
    o: &GenOptions,
    job: &StepJob,
    started: std::time::Instant,
    done: &mut GenOutcome,
    say: &dyn Fn(&str),
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
    let left = job.time_limit.map(|l| l.saturating_sub(started.elapsed()));
    if left.is_some_and(|l| l.is_zero()) {
        for (_, name) in &vlms {
            done.notes.push(format!(
                "{name}'s vision encoder: not measured, the time limit ran out before it"
            ));
        }
        return Ok(());
    }
    let job = &StepJob {
        time_limit: left,
        ..job.clone()
    };
    // The language model's summary, as the step model wrote it, to follow the vision encoder's.
    let summaries: Vec<(PathBuf, Option<Vec<u8>>)> = vlms
        .iter()
        .map(|(_, name)| {
            let md = done.out.join(format!("{name}.md"));
            let text = std::fs::read(&md).ok();
            (md, text)
        })
        .collect();
    say(&format!(
        "gen-policy: {} VLM(s): the vision encoder by the step model too, from steps of its own layers",
        vlms.len()
    ));
    let vision = GenOptions {
        models: vlms.iter().map(|(c, _)| c.clone()).collect(),
        component: Some(fp8_engine::Role::Vit),
        out: Some(done.out.clone()),
        ..o.clone()
    };
    let v = super::gen_policy_step(&vision, job, say)?;
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
    // The model's own notes (defaults applied) come once, from the language model's pass.
    for n in v.notes {
        if !done.notes.contains(&n) {
            done.notes.push(n);
        }
    }
    Ok(())
}

/// The vision encoder's layouts among the language model's: one per TP and CP (it has no
/// experts: EP 1, ETP its TP), in their order.
pub(super) fn vision_layouts(layouts: &[fp8_engine::Parallel]) -> Vec<fp8_engine::Parallel> {
    let mut out: Vec<fp8_engine::Parallel> = Vec::new();
    for p in layouts {
        let v = fp8_engine::Parallel::new(p.tp, 1, p.tp, p.cp);
        if !out.contains(&v) {
            out.push(v);
        }
    }
    out
}

/// The vision encoder's job: the language model's counts and executions in the TE blocks (the
/// Megatron judge builds `GPTModel`'s language model), all its layers dense, its measured
/// recipe alone (the numerics probe reads the language model); a note says what was not taken.
pub(super) fn vision_job(job: &StepJob, model: &str, notes: &mut Vec<String>) -> StepJob {
    if job.trainer != "te" {
        notes.push(format!(
            "{model}'s vision encoder: its steps and its check are the TE blocks' (the {} judge builds the language model only)",
            job.trainer
        ));
    }
    if job.mix.is_some() {
        notes.push(format!(
            "{model}'s vision encoder: the measured recipe alone (the per-module recipe choice probes the language model's numerics)"
        ));
    }
    StepJob {
        trainer: "te".to_owned(),
        dense_layers: None,
        mix: None,
        ..job.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fp8_engine::Parallel;

    #[test]
    fn the_vision_encoder_has_one_layout_per_tp_and_cp() {
        let llm = [
            Parallel::new(1, 8, 1, 1),
            Parallel::new(1, 4, 1, 1),
            Parallel::new(2, 8, 1, 1),
            Parallel::new(2, 8, 1, 2),
        ];
        assert_eq!(
            vision_layouts(&llm),
            vec![
                Parallel::new(1, 1, 1, 1),
                Parallel::new(2, 1, 2, 1),
                Parallel::new(2, 1, 2, 2)
            ]
        );
    }

    #[test]
    fn a_time_limit_the_language_model_used_up_leaves_the_vision_encoder_unmeasured_and_said() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let o = GenOptions {
            models: vec![root.join("fixtures/models/qwen3_vl_235b_a22b.yaml")],
            config_root: None,
            python: "/nonexistent/python3".into(),
            ..super::super::command::test_options()
        };
        let job = StepJob {
            tuner: super::super::StepTuner::Model,
            time_limit: Some(std::time::Duration::from_secs(3)),
            ..super::super::command::test_job()
        };
        let dir = tempfile::tempdir().unwrap();
        let mut done = GenOutcome {
            estimated: false,
            reports: Vec::new(),
            files: Vec::new(),
            out: dir.path().to_path_buf(),
            notes: Vec::new(),
            host: crate::host::HostSource::NotNeeded,
        };
        let started = std::time::Instant::now() - std::time::Duration::from_secs(5);
        // No worker starts (its interpreter does not exist): the note is all.
        add_vision(&o, &job, started, &mut done, &|_| {}).unwrap();
        assert_eq!(
            done.notes,
            ["qwen3_vl_235b_a22b's vision encoder: not measured, the time limit ran out before it"]
        );
        assert!(done.files.is_empty() && done.reports.is_empty());
    }

    #[test]
    fn the_vision_encoders_job_is_the_te_blocks_in_its_measured_recipe() {
        let job = StepJob {
            tuner: super::super::StepTuner::Model,
            trainer: "megatron".into(),
            dense_layers: Some(1),
            mix: Some(crate::module_mix::RecipeMix {
                recipes: vec![fp8_policy::Recipe::Tensorwise],
                numerics: Vec::new(),
                max_quant_error: 0.1,
            }),
            manual_gc: true,
            ..super::super::command::test_job()
        };
        let mut notes = Vec::new();
        let v = vision_job(&job, "vlm", &mut notes);
        assert_eq!(
            (v.trainer.as_str(), v.dense_layers, v.mix.is_none()),
            ("te", None, true)
        );
        assert_eq!((v.tokens, v.manual_gc), (job.tokens.clone(), true));
        assert!(
            notes.len() == 2 && notes[0].contains("TE blocks") && notes[1].contains("recipe"),
            "{notes:?}"
        );
        assert!(
            vision_job(
                &StepJob {
                    trainer: "te".into(),
                    mix: None,
                    ..job
                },
                "vlm",
                &mut notes
            )
            .trainer
                == "te"
        );
        assert_eq!(notes.len(), 2);
    }
}
