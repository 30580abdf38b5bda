//! Tests of the end-to-end section's readers and labels.
use std::path::Path;

use super::{LOGS, PARTS, Parts, sections};

#[test]
fn prose_blocks_run_from_their_marker_to_the_next_as_written() {
    let p = Parts::parse(
        "<!-- a note, not a block -->\nignored\n<!-- one -->\n\n### A\ntext\n<!-- two -->\nlast",
    );
    assert_eq!(p.get("one").unwrap(), "\n### A\ntext\n");
    assert_eq!(p.get("two").unwrap(), "last");
    assert!(p.get("three").unwrap_err().contains("<!-- three -->"));
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let shipped = Parts::parse(&std::fs::read_to_string(root.join(PARTS)).unwrap());
    for name in ["combine", "tp", "tp-policies", "tp-closing"] {
        assert!(!shipped.get(name).unwrap().trim().is_empty(), "{name}");
    }
}

#[test]
fn the_sections_data_file_reads_and_names_existing_runs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let sec = sections(&root).unwrap();
    assert!(sec.scenarios.len() >= 10 && !sec.combine.is_empty());
    for rel in sec.scenarios.iter().flat_map(|s| &s.files) {
        assert!(root.join(LOGS).join(rel).exists(), "{rel}");
    }
    for c in &sec.combine {
        assert!(
            root.join(&c.cublaslt).exists() && root.join(&c.te).exists(),
            "{}",
            c.model
        );
    }
}
