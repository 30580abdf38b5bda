//! Duplicate keys in a JSON object: `serde_json` keeps the last one silently, and so did the
//! reference loader, so a policy with `"row"` twice answered from the second. We find them
//! before anything else reads the document.

use std::collections::HashMap;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};

/// The first duplicated key, when there is one: its JSON path (`rules.row.fc2`) and the
/// positions (1-based) of its two occurrences among the object's keys.
pub(crate) fn first_duplicate(text: &str) -> Option<Duplicate> {
    let mut de = serde_json::Deserializer::from_str(text);
    match (Walk {
        path: String::new(),
    })
    .deserialize(&mut de)
    {
        Err(e) => {
            let text = e.to_string();
            let rest = text.strip_prefix(MARK)?;
            // serde_json appends " at line L column C".
            let rest = rest.rsplit_once(" at line ").map_or(rest, |(p, _)| p);
            let (positions, path) = rest.split_once(' ')?;
            let (first, second) = positions.split_once(',')?;
            Some(Duplicate {
                path: path.to_owned(),
                first: first.parse().ok()?,
                second: second.parse().ok()?,
            })
        }
        Ok(()) => None,
    }
}

/// A key that an object holds twice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Duplicate {
    /// JSON path of the key.
    pub path: String,
    /// Position of the first occurrence among the object's keys (1-based).
    pub first: usize,
    /// Position of the second.
    pub second: usize,
}

const MARK: &str = "duplicate key at ";

struct Walk {
    path: String,
}

impl Walk {
    fn child(&self, key: &str) -> Walk {
        Walk {
            path: if self.path.is_empty() {
                key.to_owned()
            } else {
                format!("{}.{key}", self.path)
            },
        }
    }
}

impl<'de> DeserializeSeed<'de> for Walk {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0usize;
        while seq
            .next_element_seed(Walk {
                path: format!("{}[{i}]", self.path),
            })?
            .is_some()
        {
            i += 1;
        }
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = HashMap::new();
        let mut n = 0usize;
        while let Some(key) = map.next_key::<String>()? {
            n += 1;
            let child = self.child(&key);
            if let Some(first) = seen.insert(key, n) {
                return Err(A::Error::custom(format!(
                    "{MARK}{first},{n} {}",
                    child.path
                )));
            }
            map.next_value_seed(child)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::first_duplicate;

    fn path(text: &str) -> Option<(String, usize, usize)> {
        first_duplicate(text).map(|d| (d.path, d.first, d.second))
    }

    #[test]
    fn finds_duplicates_at_any_depth() {
        assert_eq!(first_duplicate(r#"{"a": 1, "b": 2}"#), None);
        assert_eq!(
            path(r#"{"rules": {"row": {}, "column": {}, "row": {}}}"#),
            Some(("rules.row".into(), 1, 3))
        );
        assert_eq!(
            path(r#"{"rules": {"row": {"fc2": [], "fc2": []}}}"#),
            Some(("rules.row.fc2".into(), 1, 2))
        );
        assert_eq!(
            path(r#"{"r": [{"tp": 1}, {"tp": 1, "tp": 2}]}"#),
            Some(("r[1].tp".into(), 1, 2))
        );
        // Syntax errors are the parser's business, not ours.
        assert_eq!(first_duplicate(r#"{"a": "#), None);
    }
}
