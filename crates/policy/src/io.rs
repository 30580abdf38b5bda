//! Loading from and writing to disk, through `fp8-io`: bounded reads of regular files only, and
//! atomic writes that never replace a device node or write beside a symlink.

use std::path::Path;

use crate::error::{MAX_POLICY_BYTES, PolicyError};
use crate::parse::parse_str;
use crate::policy::Policy;

impl Policy {
    /// Loads and validates a policy file.
    ///
    /// Errors name the file and the JSON path of the problem. Only regular files are read (a
    /// FIFO or a device is refused at once), and never more than 64 MiB, whatever size the file
    /// reports.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("policy.json");
    /// # std::fs::write(&path, r#"{"version": 1, "speedup_threshold": 1.0, "rules": {}}"#)?;
    /// let policy = fp8_policy::Policy::load(&path)?;
    /// assert_eq!(policy.rule_count(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn load(path: impl AsRef<Path>) -> Result<Policy, PolicyError> {
        let path = path.as_ref();
        let text = fp8_io::read_to_string_limited(path, MAX_POLICY_BYTES)?;
        parse_str(&text, path)
    }

    /// Parses and validates a policy from JSON text. `origin` names the source in errors.
    pub fn from_json_str(text: &str, origin: impl AsRef<Path>) -> Result<Policy, PolicyError> {
        if text.len() as u64 > MAX_POLICY_BYTES {
            return Err(PolicyError::Invalid {
                file: origin.as_ref().into(),
                path: "$".into(),
                problem: crate::Problem::OutOfRange(format!("{} bytes of text", text.len())),
            });
        }
        parse_str(text, origin.as_ref())
    }

    /// Writes the policy atomically: a temp file in the same directory, fsync, rename, then an
    /// fsync of the directory. On any failure the previous file is left untouched. A symlink is
    /// written through to its target; a target that is not a regular file is refused.
    ///
    /// ```
    /// use fp8_policy::{DenseKind, DenseRule, Policy, Threshold};
    /// # let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("policy.json");
    /// let mut p = Policy::new(1.0)?;
    /// p.add_dense_rule(DenseKind::Row, "fc2", DenseRule { tp: 4, min_tokens: Threshold::From(2048), min_tokens_graphed: None, measured_speedup: Some(1.2) })?;
    /// p.write(&path)?;
    /// assert_eq!(Policy::load(&path)?, p);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn write(&self, path: impl AsRef<Path>) -> Result<(), PolicyError> {
        fp8_io::write_atomic(path.as_ref(), self.to_json().as_bytes())?;
        Ok(())
    }
}
