//! Typed access to a config mapping, with errors that name the file and the dotted field.

use std::path::Path;

use serde_json::{Map, Value};

use super::error::ConfigError;

/// A view of one mapping in a config file.
#[derive(Clone, Copy)]
pub(crate) struct Fields<'a> {
    pub file: &'a Path,
    pub prefix: &'a str,
    pub map: &'a Map<String, Value>,
}

impl<'a> Fields<'a> {
    pub fn path(&self, key: &str) -> String {
        if self.prefix.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.prefix)
        }
    }

    pub fn err(
        &self,
        key: &str,
        problem: impl Into<String>,
        fix: impl Into<String>,
    ) -> ConfigError {
        ConfigError::field(self.file, &self.path(key), problem, fix)
    }

    pub fn has(&self, key: &str) -> bool {
        self.map.get(key).is_some_and(|v| !v.is_null())
    }

    /// The first of `keys` that is present (and not null), with its name.
    fn first(&self, keys: &[&'a str]) -> Option<(&'a str, &'a Value)> {
        keys.iter()
            .find_map(|k| self.map.get(*k).filter(|v| !v.is_null()).map(|v| (*k, v)))
    }

    pub fn opt_u64(&self, keys: &[&'a str]) -> Result<Option<u64>, ConfigError> {
        let Some((k, v)) = self.first(keys) else {
            return Ok(None);
        };
        let n = match v {
            Value::Number(n) => n.as_u64().or_else(|| {
                n.as_f64()
                    .filter(|f| *f >= 0.0 && f.fract() == 0.0 && *f < 9.0e15)
                    .map(|f| f as u64)
            }),
            // YAML written by hand sometimes quotes numbers.
            Value::String(s) => s.trim().parse().ok(),
            _ => None,
        };
        n.map(Some).ok_or_else(|| {
            self.err(
                k,
                format!("expected a non-negative integer, found {v}"),
                "write a whole number",
            )
        })
    }

    pub fn req_u64(&self, keys: &[&'a str], what: &str) -> Result<u64, ConfigError> {
        self.opt_u64(keys)?.ok_or_else(|| {
            self.err(
                keys[0],
                format!("missing ({what})"),
                format!("add `{}` to the config", keys[0]),
            )
        })
    }

    pub fn req_pos(&self, keys: &[&'a str], what: &str) -> Result<u64, ConfigError> {
        let n = self.req_u64(keys, what)?;
        if n == 0 {
            let k = self.first(keys).map_or(keys[0], |(k, _)| k);
            return Err(self.err(k, "must be at least 1, found 0", "fix the value"));
        }
        Ok(n)
    }

    pub fn opt_bool(&self, keys: &[&'a str]) -> Result<Option<bool>, ConfigError> {
        let Some((k, v)) = self.first(keys) else {
            return Ok(None);
        };
        match v {
            Value::Bool(b) => Ok(Some(*b)),
            Value::String(s) if s.eq_ignore_ascii_case("true") => Ok(Some(true)),
            Value::String(s) if s.eq_ignore_ascii_case("false") => Ok(Some(false)),
            other => Err(self.err(
                k,
                format!("expected true or false, found {other}"),
                "write true or false",
            )),
        }
    }

    pub fn opt_str(&self, keys: &[&'a str]) -> Result<Option<&'a str>, ConfigError> {
        let Some((k, v)) = self.first(keys) else {
            return Ok(None);
        };
        v.as_str().map(Some).ok_or_else(|| {
            self.err(
                k,
                format!("expected a string, found {v}"),
                "quote the value",
            )
        })
    }

    pub fn sub(&self, key: &'a str, prefix: &'a str) -> Result<Option<Fields<'a>>, ConfigError> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(m)) => Ok(Some(Fields {
                file: self.file,
                prefix,
                map: m,
            })),
            Some(other) => Err(self.err(
                key,
                format!("expected a mapping, found {other}"),
                "make it a mapping",
            )),
        }
    }
}
