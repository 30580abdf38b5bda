//! Generated files are checked in; these fail when they are stale. Update with
//! `FP8_UPDATE_POLICIES=1 cargo test -p xtask --test generated` (or `cargo xtask gen-policy
//! --check` / `cargo xtask results` with the same variable).

use xtask::{UPDATE_ENV, check_policies, check_results, root};

fn update() -> bool {
    std::env::var_os(UPDATE_ENV).is_some_and(|v| v == "1")
}

#[test]
fn policies_are_up_to_date_with_the_committed_reports() {
    let stale = check_policies(&root(), update()).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        stale.is_empty(),
        "policies/ is stale ({UPDATE_ENV}=1 cargo xtask gen-policy --check):\n{}",
        stale.join("\n")
    );
}

#[test]
fn results_are_up_to_date_with_the_committed_reports() {
    let stale = check_results(&root(), update()).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        !stale,
        "docs/RESULTS.md is stale: run `cargo xtask results`"
    );
}
