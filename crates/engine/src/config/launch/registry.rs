//! LoongForge's model registry: `MODEL_CONFIG_REGISTRY` in the checkout's
//! `loongforge/utils/config_map.py`, a dict literal of `"name": {"config_path": "...",
//! "config_name": "..."}` entries, read as text (nothing is imported or run). `--model-name NAME`
//! is `<checkout>/<config_path>/<config_name>.yaml` of `NAME` lower-cased, as LoongForge's
//! `get_config_from_model_name` resolves it.

use std::path::{Path, PathBuf};

/// Where the registry lives in a checkout.
pub(crate) const REGISTRY_FILE: &str = "loongforge/utils/config_map.py";

/// One registered model: its name and the YAML it names, relative to the checkout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub name: String,
    pub config_path: String,
    pub config_name: String,
}

impl Entry {
    /// The YAML this entry names under the checkout `root`.
    pub fn yaml(&self, root: &Path) -> PathBuf {
        root.join(&self.config_path)
            .join(format!("{}.yaml", self.config_name))
    }
}

/// The registry's entries from the text of `config_map.py`; `None` where the text holds no
/// `MODEL_CONFIG_REGISTRY = {...}` of that form (a checkout whose registry changed shape: the
/// caller falls back to searching the configs by name, and says so).
pub(crate) fn entries(text: &str) -> Option<Vec<Entry>> {
    const NAME: &str = "MODEL_CONFIG_REGISTRY";
    // The assignment: the name at a line's start (not a mention in a comment or a docstring).
    let at = text
        .match_indices(NAME)
        .map(|(i, _)| i)
        .find(|&i| i == 0 || text[..i].ends_with('\n'))?;
    let mut t = Tokens {
        s: &text[at + NAME.len()..],
    };
    // An annotation (`: dict[str, dict]`) may sit between the name and `=`.
    let mut assigned = false;
    for _ in 0..4 {
        match t.next()? {
            Tok::Eq => {
                assigned = true;
                break;
            }
            Tok::Other | Tok::Colon => continue,
            _ => return None,
        }
    }
    if !assigned {
        return None;
    }
    t.expect(Tok::Open)?;
    let mut out = Vec::new();
    loop {
        let name = match t.next()? {
            Tok::Close => return Some(out),
            Tok::Str(s) => s,
            _ => return None,
        };
        t.expect(Tok::Colon)?;
        t.expect(Tok::Open)?;
        let (mut path, mut file) = (None, None);
        loop {
            let key = match t.next()? {
                Tok::Close => break,
                Tok::Str(s) => s,
                _ => return None,
            };
            t.expect(Tok::Colon)?;
            let Tok::Str(value) = t.next()? else {
                return None;
            };
            match key.as_str() {
                "config_path" => path = Some(value),
                "config_name" => file = Some(value),
                _ => {}
            }
            match t.next()? {
                Tok::Comma => {}
                Tok::Close => break,
                _ => return None,
            }
        }
        out.push(Entry {
            name,
            config_path: path?,
            config_name: file?,
        });
        match t.next()? {
            Tok::Comma => {}
            Tok::Close => return Some(out),
            _ => return None,
        }
    }
}

#[derive(Debug, PartialEq)]
enum Tok {
    Str(String),
    Open,
    Close,
    Colon,
    Comma,
    Eq,
    /// Anything else (a name, a bracket): the registry's form ends or is not this one.
    Other,
}

/// Python's tokens as far as a dict literal of strings needs them: comments and whitespace
/// skipped, `'...'` and `"..."` with backslash escapes kept literal.
struct Tokens<'a> {
    s: &'a str,
}

impl Tokens<'_> {
    fn next(&mut self) -> Option<Tok> {
        loop {
            self.s = self.s.trim_start();
            if let Some(rest) = self.s.strip_prefix('#') {
                self.s = rest.find('\n').map_or("", |i| &rest[i..]);
                continue;
            }
            break;
        }
        let c = self.s.chars().next()?;
        let one = |t: Tok, s: &mut &str| {
            *s = &s[1..];
            Some(t)
        };
        match c {
            '{' => one(Tok::Open, &mut self.s),
            '}' => one(Tok::Close, &mut self.s),
            ':' => one(Tok::Colon, &mut self.s),
            ',' => one(Tok::Comma, &mut self.s),
            '=' => one(Tok::Eq, &mut self.s),
            '"' | '\'' => {
                let body = &self.s[1..];
                let mut out = String::new();
                let mut chars = body.char_indices();
                while let Some((i, ch)) = chars.next() {
                    match ch {
                        '\\' => out.push(chars.next()?.1),
                        '\n' => return None,
                        ch if ch == c => {
                            self.s = &body[i + 1..];
                            return Some(Tok::Str(out));
                        }
                        ch => out.push(ch),
                    }
                }
                None
            }
            _ => {
                let n = self
                    .s
                    .find(|ch: char| ch.is_whitespace())
                    .unwrap_or(self.s.len())
                    .max(c.len_utf8());
                self.s = &self.s[n..];
                Some(Tok::Other)
            }
        }
    }

    fn expect(&mut self, want: Tok) -> Option<()> {
        (self.next()? == want).then_some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_dict_literal_with_comments_quotes_and_trailing_commas() {
        let text = r#"
from pathlib import Path
# registry for model config
MODEL_CONFIG_REGISTRY = {
    # deepseek
    "deepseek-v3": {
        "config_path": "configs/models/deepseek3",
        "config_name": "deepseek_v3",
    },
    'minimax2.5-230b': {'config_name': 'minimax_m2_5', 'config_path': 'configs/models/minimax'},
    "odd\"name": {"config_path": "c", "config_name": "n", "note": "kept aside"}
}
def normalize_model_name(name): ...
"#;
        let e = entries(text).unwrap();
        assert_eq!(e.len(), 3);
        assert_eq!(
            e[1],
            Entry {
                name: "minimax2.5-230b".into(),
                config_path: "configs/models/minimax".into(),
                config_name: "minimax_m2_5".into(),
            }
        );
        assert_eq!(e[2].name, "odd\"name");
        assert_eq!(
            e[0].yaml(Path::new("/lf")),
            Path::new("/lf/configs/models/deepseek3/deepseek_v3.yaml")
        );
    }

    #[test]
    fn another_form_is_none_never_a_guess() {
        for text in [
            "",
            "MODEL_CONFIG_REGISTRY = dict(a=1)",
            "MODEL_CONFIG_REGISTRY = {\"a\": {\"config_path\": \"x\"}}",
            "MODEL_CONFIG_REGISTRY = {\"a\": {\"config_path\": f(x), \"config_name\": \"y\"}}",
            "MODEL_CONFIG_REGISTRY = {\"a\": {\"config_path\": \"x\", \"config_name\": \"y\"}",
            "MODEL_CONFIG_REGISTRY = {\"a",
        ] {
            assert_eq!(entries(text), None, "{text}");
        }
        assert_eq!(entries("MODEL_CONFIG_REGISTRY: dict = {}"), Some(vec![]));
    }

    proptest::proptest! {
        /// Any text: an answer or `None`, never a panic (a cut string, a multi-byte char where
        /// a token ends).
        #[test]
        fn any_text_is_read_or_refused(text in "(MODEL_CONFIG_REGISTRY|[ {}:,=#'\"\\\\\n]|[a-z_/.é-]){0,80}") {
            let _ = entries(&text);
            let _ = entries(&format!("MODEL_CONFIG_REGISTRY = {text}"));
        }

        /// A registry written as Python writes one reads back entry for entry.
        #[test]
        fn written_entries_read_back(
            rows in proptest::collection::vec(("[a-z0-9.-]{1,12}", "[a-z0-9/_.]{1,20}", "[a-z0-9_]{1,12}", proptest::bool::ANY), 0..6)
        ) {
            let q = |s: &str, single: bool| if single { format!("'{s}'") } else { format!("\"{s}\"") };
            let mut text = String::from("# models\nMODEL_CONFIG_REGISTRY = {\n");
            for (name, path, file, single) in &rows {
                text += &format!(
                    "    {}: {{ # one\n {}: {}, {}: {},\n}},\n",
                    q(name, *single),
                    q("config_path", !*single),
                    q(path, *single),
                    q("config_name", *single),
                    q(file, !*single)
                );
            }
            text += "}\n";
            let got = entries(&text).unwrap();
            let want: Vec<Entry> = rows
                .iter()
                .map(|(n, p, f, _)| Entry { name: n.clone(), config_path: p.clone(), config_name: f.clone() })
                .collect();
            proptest::prop_assert_eq!(got, want);
        }
    }
}
