//! `--resume`: a layout's inputs an earlier run of the same command left in the reports folder
//! (a run stopped by its time limit, or cut, while it checked), reused so that only the check
//! runs. Reused only where they were measured as this run would measure them: a field that
//! differs is refused, naming the file, the field and the fix. The GPU is compared once the
//! first check document says which one ran it ([`same_gpu`]).

use std::collections::BTreeSet;
use std::path::Path;

use fp8_policy::Execution;
use fp8_report::step_inputs::{StepInputs, read_step_inputs};

use super::Layout;

impl Layout<'_> {
    /// The inputs at `json` to reuse, `None` where there are none (they are measured), or the
    /// error where they were measured otherwise.
    pub(super) fn resumable(
        &self,
        json: &Path,
        say: &dyn Fn(&str),
    ) -> Result<Option<StepInputs>, String> {
        let at = format!("{} {}", self.model, self.p);
        if !json.is_file() {
            say(&format!(
                "{at}: --resume: no inputs at {}: measuring them",
                json.display()
            ));
            return Ok(None);
        }
        let fix = "fix: run without --resume (the inputs are measured again)";
        let d = read_step_inputs(json).map_err(|e| format!("{e}; {fix}"))?;
        if !d.complete {
            return Err(format!(
                "{}: field `complete`: false, the run that measured them was stopped before they \
                 ended; {fix}",
                json.display()
            ));
        }
        let listed = |v: &BTreeSet<String>| v.iter().cloned().collect::<Vec<_>>().join(",");
        let tokens: BTreeSet<String> = d.modules.iter().map(|m| m.tokens.to_string()).collect();
        let want_tokens: BTreeSet<String> = self.job.tokens.iter().map(u64::to_string).collect();
        let executions: BTreeSet<String> = d
            .step_times
            .iter()
            .map(|s| s.execution)
            .chain(d.failed.iter().map(|f| f.execution))
            .map(|e: Execution| e.name().to_owned())
            .collect();
        let want_executions: BTreeSet<String> = self
            .job
            .executions
            .iter()
            .map(|e| e.name().to_owned())
            .collect();
        let component = if self.o.vision_encoder() {
            "vit"
        } else {
            "llm"
        };
        let p = self.p;
        let layout = |tp: u32, ep: u32, etp: u32| format!("TP {tp} EP {ep} ETP {etp}");
        let mut fields: Vec<(&str, String, String)> = vec![
            ("model_name", d.model_name.clone(), self.model.to_owned()),
            ("component", d.component.clone(), component.to_owned()),
            (
                "tp, ep, etp",
                layout(d.tp, d.ep.unwrap_or(1), d.etp.unwrap_or(1)),
                layout(p.tp, p.ep, p.etp),
            ),
            (
                "fp8_recipe",
                d.fp8_recipe.clone(),
                self.o.measure.recipe.recipe().name().to_owned(),
            ),
            ("layers", d.layers.to_string(), self.job.layers.to_string()),
            (
                "grad_accum",
                d.grad_accum.to_string(),
                self.job.grad_accum.to_string(),
            ),
            (
                "manual_gc",
                d.manual_gc.to_string(),
                self.job.manual_gc.to_string(),
            ),
            // Documents before the field held FP8 weights; today's worker measures BF16 ones.
            (
                "fp8_param",
                d.weights_words().to_owned(),
                "BF16 weights".to_owned(),
            ),
            ("modules[].tokens", listed(&tokens), listed(&want_tokens)),
            (
                "step_times[].execution",
                listed(&executions),
                listed(&want_executions),
            ),
        ];
        fields.extend(self.recipe_fields(&d));
        if let Some((field, have, want)) = fields.iter().find(|(_, have, want)| have != want) {
            return Err(format!(
                "{}: field `{field}`: measured with {have}, this run measures {want}; {fix}, \
                 or with the earlier run's settings",
                json.display()
            ));
        }
        let host = d
            .host
            .as_ref()
            .map_or(String::new(), |h| format!(", host {h}"));
        say(&format!(
            "{at}: --resume: the inputs an earlier run measured on {}{host} ({}) are reused; the check runs",
            d.device,
            json.display()
        ));
        Ok(Some(d))
    }

    /// The recipe's options, where the document records them (workers since they were): each
    /// field, the document's value and this run's.
    fn recipe_fields(&self, d: &StepInputs) -> Vec<(&'static str, String, String)> {
        let mut fields = Vec::new();
        let r = self.o.measure.recipe;
        let delayed = r.recipe() == fp8_policy::Recipe::Delayed;
        let options = [
            (
                "fp8_format",
                d.fp8_format.clone(),
                r.format().name().to_owned(),
            ),
            (
                "amax_history_len",
                d.amax_history_len.map(|n| n.to_string()),
                r.history_len().to_string(),
            ),
            (
                "amax_compute_algo",
                d.amax_compute_algo.clone(),
                r.algo().name().to_owned(),
            ),
        ];
        for (field, have, want) in options {
            if let Some(have) = have.filter(|_| field == "fp8_format" || delayed) {
                fields.push((field, have, want));
            }
        }
        fields
    }
}

/// A resumed layout's check against its inputs: timed on the same GPU and TE, or the error
/// naming the inputs file and the fix.
pub(super) fn same_gpu(inputs: &StepInputs, file: &Path, check: &StepInputs) -> Result<(), String> {
    if (&check.device, &check.te_version) == (&inputs.device, &inputs.te_version) {
        return Ok(());
    }
    Err(format!(
        "{}: field `device`: measured on {} (TE {}), and this run's check on {} (TE {}); fix: \
         run without --resume (the inputs are measured again on this GPU)",
        file.display(),
        inputs.device,
        inputs.te_version,
        check.device,
        check.te_version
    ))
}
