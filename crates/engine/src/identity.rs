//! Whether a policy belongs to the model being planned: by the per-rank GEMM shapes it
//! recorded for each key ([`other_model`]), else by name ([`model_mismatch`]).

use fp8_policy::Policy;

use crate::inventory::ModuleSpec;

/// Why `policy` belongs to another model than the one of `specs`, if it does. Thresholds are
/// crossovers of per-rank GEMM shapes, so identity is by shape: a module whose key the policy
/// measured at other shapes (a config of other dimensions under the same name, too). A policy
/// that recorded no shapes (an older file, a step-only one) is compared by model name.
pub fn other_model(policy: &Policy, model: &str, specs: &[ModuleSpec]) -> Option<String> {
    let prov = policy.provenance()?;
    if prov.shapes.is_empty() {
        return model_mismatch(policy, model);
    }
    let mut differ = Vec::new();
    for s in specs {
        let Some(key) = s.lookup().key() else {
            continue;
        };
        let Some(measured) = prov.shapes_of(&key) else {
            continue;
        };
        let mine = fp8_policy::GemmShape {
            in_features: s.in_features,
            out_features: s.out_features,
        };
        if !measured.contains(&mine) {
            let theirs: Vec<String> = measured.iter().map(ToString::to_string).collect();
            differ.push(format!(
                "{} is {mine} here, {} in the policy",
                s.name,
                theirs.join(" or ")
            ));
        }
    }
    if differ.is_empty() {
        return None;
    }
    let made_for = if prov.models.is_empty() {
        String::new()
    } else {
        format!(" (made for {})", prov.models.join(", "))
    };
    let more = if differ.len() > 2 {
        format!(", and {} more", differ.len() - 2)
    } else {
        String::new()
    };
    differ.truncate(2);
    Some(format!(
        "the policy{made_for} was measured at other per-rank GEMM shapes than {model}'s \
         ({}{more}): its thresholds belong to another model; make a policy for this one \
         (fp8sel gen-policy --model CONFIG)",
        differ.join("; ")
    ))
}

/// A warning when the policy's provenance names the models it was measured on and `model` is
/// not one of them: thresholds are shapes' crossovers, and another model has other shapes.
pub fn model_mismatch(policy: &Policy, model: &str) -> Option<String> {
    let models = &policy.provenance()?.models;
    if models.is_empty() || models.iter().any(|m| m == model) {
        return None;
    }
    Some(format!(
        "the policy was made for {} but the model is {model}: its thresholds belong to other \
         shapes; make a policy for this model (fp8sel gen-policy --model CONFIG)",
        models.join(", ")
    ))
}
