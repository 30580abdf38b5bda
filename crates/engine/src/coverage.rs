//! Whether a plan is covered: the gaps a policy leaves at a layout ([`Uncovered`]) and the one
//! command that fills them ([`fill_command`]).

use crate::model::Role;
use crate::parallel::Parallel;
use crate::plan::{MissingRule, Plan};

/// What a plan leaves uncovered: modules whose key has no rule at this layout in their
/// component's policy (and no measured BF16 answer). A trainer launched so runs them BF16
/// because the policy does not cover the layout, not because FP8 loses there; the CLI, the
/// binding and the hook refuse it unless asked to allow it. A component planned without any
/// policy is not a gap: the caller gave none, and every module's reason says so.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Uncovered {
    /// The missing rules and the modules that need them.
    pub missing: Vec<MissingRule>,
    /// Module instances (groups x layers) the gaps leave BF16.
    pub instances: u64,
}

impl Plan {
    /// The plan's gaps in `roles`' components, or `None` when their policies cover every module
    /// there.
    pub fn uncovered(&self, roles: &[Role]) -> Option<Uncovered> {
        let missing: Vec<MissingRule> = self
            .summary
            .missing_rules
            .iter()
            .filter(|m| roles.contains(&m.component))
            .cloned()
            .collect();
        let instances = self
            .modules
            .iter()
            .filter(|m| roles.contains(&m.spec.component) && m.missing_key.is_some())
            .map(|m| m.spec.layers)
            .sum();
        (!missing.is_empty()).then_some(Uncovered { missing, instances })
    }
}

impl Uncovered {
    /// The refusal in words: each missing key with its modules, then the command that fills
    /// them (`fill`, from [`fill_command`]).
    pub fn message(&self, fill: &str) -> String {
        let mut lines = vec![format!(
            "the policy does not cover this layout: {} module instance(s) have no rule and would \
             run BF16 because of the gap, not because FP8 loses there",
            self.instances
        )];
        for m in &self.missing {
            lines.push(format!(
                "  missing rule {} {}: {}",
                m.component,
                m.key,
                m.modules.join(", ")
            ));
        }
        lines.push(format!("fix: make a policy for this layout: {fill}"));
        lines.join("\n")
    }
}

/// The one `fp8sel` command that makes a policy covering every module of `model` (a config
/// file; `None` when the model came as fields) at `parallel`, written under `fp8sel-fill/` so
/// that it never replaces a shipped file: it measures on a GPU and estimates with the cost model
/// without one (its outputs say which). Here, and not in each front, so that the CLI, the
/// binding and the hook print the same command.
pub fn fill_command(
    model: Option<&str>,
    config_root: Option<&str>,
    parallel: Parallel,
    recipe: Option<&str>,
    moe: bool,
) -> String {
    let model = model.map_or_else(|| "YOUR_MODEL_CONFIG".to_owned(), shell_word);
    let root = config_root
        .map(|r| format!(" --config-root {}", shell_word(r)))
        .unwrap_or_default();
    let experts = if moe {
        format!(" --ep {} --etp {}", parallel.ep, parallel.etp)
    } else {
        String::new()
    };
    let recipe = recipe
        .filter(|r| *r != "blockwise")
        .map(|r| format!(" --recipe {r}"))
        .unwrap_or_default();
    format!(
        "fp8sel gen-policy --model {model}{root} --tp {}{experts}{recipe} --out {FILL_DIR}",
        parallel.tp
    )
}

/// Where [`fill_command`]'s policy goes, relative to where it runs.
pub const FILL_DIR: &str = "fp8sel-fill";

/// `s` as one POSIX shell word: as it is when it holds only safe characters, else in single
/// quotes.
fn shell_word(s: &str) -> String {
    let safe = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if safe {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}
