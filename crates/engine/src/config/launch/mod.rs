//! A Megatron-LM launch script (`.sh`): the flags it passes `pretrain_gpt.py` (`--num-layers 32
//! --swiglu ...`) as the fields the Megatron reader reads (the same names, `-` as `_`).
//!
//! Words are split as bash splits the forms launch scripts use: quotes, `\` line continuations,
//! `#` comments, array parentheses, `;` `|` `&`. A flag's value is the next word unless that is
//! another flag or the end of a command (then it is a switch: `true`); `--flag=value` too;
//! Megatron's switches the engine reads never take one. `$NAME`, `${NAME}` and
//! `${NAME:-default}` expand to a `NAME=value` assigned above in the script (`export` too),
//! else to their default (a note says so: the environment is never read). Anything else shell
//! (`$(...)`, `$1`, arrays) is not evaluated: a field the engine reads whose value needs it is
//! refused, naming the flag; any other flag (data paths, logging) is kept as written and never
//! read.
//!
//! A script passing `--yaml-cfg F` is read as `F` (Megatron-LM reads that file in place of every
//! flag), beside the script or where fp8sel runs.
//!
//! Not read: the script's control flow (`if`, `case`, loops): every flag in the file counts, the
//! last of a name winning, as argparse takes a repeated flag; a read field set inside one (or
//! through a name assigned inside one) is noted, so the user checks what `explain` prints.

use std::collections::HashMap;
use std::path::Path;

use serde_json::{Map, Value};

use super::error::ConfigError;
use super::megatron::is_read;

mod arith;
mod elsewhere;
mod name;
mod program;
mod registry;
use arith::Arith;
pub(crate) use elsewhere::{Read, load};
pub(crate) use name::script_name;

/// Megatron's `store_true` flags that the engine reads: never followed by a value.
const SWITCHES: &[&str] = &[
    "group_query_attention",
    "swiglu",
    "quick_geglu",
    "multi_latent_attention",
    "enable_cuda_graph",
    "external_cuda_graph",
    "attention_output_gate",
    "selective_fp8",
    "disable_vision_class_token",
];

/// One piece of a word: its text, and whether `$` expands in it (not in single quotes).
type Piece = (String, bool);

/// An assigned name: its value (`None`: not evaluated), and the notes of the defaults it took.
type Vars = HashMap<String, (Option<String>, Vec<String>)>;

#[derive(Debug, PartialEq)]
enum Token {
    Word(Vec<Piece>),
    /// The end of a command or a group: a newline, `;`, `|`, `&`, `(` or `)`.
    Break,
}

/// What a script passes: its flags as a config mapping, its notes (defaults it used), and the
/// Python programs it runs (`pretrain_gpt.py`, `examples/multimodal/train.py`), as written.
pub(crate) struct Script {
    pub(crate) fields: Value,
    pub(crate) notes: Vec<String>,
    pub(crate) programs: Vec<String>,
}

/// Reads a script's text.
pub(crate) fn fields(text: &str, file: &Path) -> Result<Script, ConfigError> {
    let mut scan = Scan {
        file,
        vars: Vars::new(),
        notes: Vec::new(),
        out: Map::new(),
        depth: 0,
        programs: Vec::new(),
    };
    scan.run(&tokens(text), &[], 0)?;
    Ok(Script {
        fields: Value::Object(scan.out),
        notes: scan.notes,
        programs: scan.programs,
    })
}

/// The reader's state over the script's words.
struct Scan<'a> {
    file: &'a Path,
    vars: Vars,
    notes: Vec<String>,
    out: Map<String, Value>,
    /// How deep in `if`/`case`/loops: every branch is read, so what is set there is said.
    depth: usize,
    /// Every word ending in `.py` that is not a flag's value (bounded: a program per command).
    programs: Vec<String>,
}

impl Scan<'_> {
    /// Reads `tokens`; `inherited`: the notes of the name whose value they are (`level` deep).
    fn run(
        &mut self,
        tokens: &[Token],
        inherited: &[String],
        level: usize,
    ) -> Result<(), ConfigError> {
        let mut i = 0;
        while i < tokens.len() {
            let Token::Word(pieces) = &tokens[i] else {
                i += 1;
                continue;
            };
            i += 1;
            if let [(w, true)] = pieces.as_slice() {
                match w.as_str() {
                    "if" | "case" | "for" | "while" | "until" | "select" => self.depth += 1,
                    "fi" | "esac" | "done" => self.depth = self.depth.saturating_sub(1),
                    _ => {}
                }
            }
            if let Some((name, value)) = assignment(pieces) {
                self.assign(name, &value, level)?;
                continue;
            }
            let word = raw(pieces);
            let Some(flag) = word.strip_prefix("--").filter(|f| !f.is_empty()) else {
                if word.ends_with(".py") && self.programs.len() < 64 {
                    self.programs.push(word);
                }
                continue;
            };
            // `--flag=value`, and `"--flag value"` quoted as one word (as arrays of strings
            // hold them, split when the array expands unquoted).
            let (name, value) = match flag.find(|c: char| c == '=' || c.is_whitespace()) {
                Some(at) => (
                    flag[..at].replace('-', "_"),
                    Some(drop_chars(pieces, 2 + flag[..at].chars().count() + 1)),
                ),
                None => {
                    let name = flag.replace('-', "_");
                    let value = match tokens.get(i) {
                        _ if SWITCHES.contains(&name.as_str()) => None,
                        Some(Token::Word(next)) if !raw(next).starts_with("--") => {
                            i += 1;
                            Some(next.clone())
                        }
                        _ => None,
                    };
                    (name, value)
                }
            };
            self.flag(name, value, inherited)?;
        }
        Ok(())
    }

    /// `NAME=value`; a value holding flags (`ARGS="--num-layers 32 ..."`, expanded unquoted
    /// where it is used) is read for them too.
    fn assign(&mut self, name: String, value: &[Piece], level: usize) -> Result<(), ConfigError> {
        let mut used = Vec::new();
        let v = expand(value, &self.vars, &mut used);
        if self.depth > 0 {
            used.push(format!(
                "launch script: {name} is assigned inside an if, case or loop: every branch \
                 is read, the last assignment winning (check the model and layout with \
                 `fp8sel explain`)"
            ));
        }
        // Where it is used unquoted, bash splits it at blanks alone (quotes and parentheses in
        // it are characters) and never expands it again. A value with a name this reader does
        // not evaluate (`--save ${CKPT}`, `CKPT=$1`) is split word by word: its other flags
        // still count, and the word it cannot evaluate stays unevaluated (refused only where a
        // read field needs it).
        let words = match v.as_deref() {
            Some(text) if text.contains("--") => Some(literal_words(text)),
            None if raw(value).contains("--") => Some(
                split_words(value)
                    .into_iter()
                    .flat_map(|w| match expand(&w, &self.vars, &mut used) {
                        Some(text) => literal_words(&text),
                        None => vec![Token::Word(w)],
                    })
                    .collect(),
            ),
            _ => None,
        };
        if let Some(words) = words.filter(|_| level < 4) {
            self.run(&words, &used, level + 1)?;
        }
        self.vars.insert(name, (v, used));
        Ok(())
    }

    /// `--name [value]` into the mapping (the last of a name winning).
    fn flag(
        &mut self,
        name: String,
        value: Option<Vec<Piece>>,
        inherited: &[String],
    ) -> Result<(), ConfigError> {
        let mut used = inherited.to_vec();
        if self.depth > 0 {
            used.push(format!(
                "launch script: --{} is passed inside an if, case or loop: every branch is \
                 read, the last one written winning (check the model and layout with `fp8sel \
                 explain`)",
                name.replace('_', "-")
            ));
        }
        let read = is_read(&name);
        let v = match value {
            None => Value::Bool(true),
            Some(p) => match expand(&p, &self.vars, &mut used) {
                Some(s) => scalar(&s),
                None if read => {
                    return Err(ConfigError::Field {
                        file: self.file.into(),
                        field: name.clone(),
                        problem: format!(
                            "`--{} {}`: a shell value fp8sel does not evaluate",
                            name.replace('_', "-"),
                            raw(&p)
                        ),
                        fix: "write the value, or assign it above in the script (NAME=value), \
                              or give a Megatron YAML or a config.json"
                            .into(),
                    });
                }
                None => Value::String(raw(&p)),
            },
        };
        // What a field the engine reads took from defaults or branches, each said once.
        if read {
            for n in used {
                if !self.notes.contains(&n) {
                    self.notes.push(n);
                }
            }
        }
        self.out.insert(name, v);
        Ok(())
    }
}

/// Splits the script into words and breaks.
fn tokens(text: &str) -> Vec<Token> {
    let mut out = Vec::new();
    let mut word: Vec<Piece> = Vec::new();
    let mut cur = String::new();
    let mut started = false;
    let mut chars = text.chars().peekable();
    let end_word =
        |word: &mut Vec<Piece>, cur: &mut String, started: &mut bool, out: &mut Vec<Token>| {
            if !cur.is_empty() {
                word.push((std::mem::take(cur), true));
            }
            if *started {
                out.push(Token::Word(std::mem::take(word)));
            }
            *started = false;
        };
    // A character taken literally (escaped): its own piece, where `$` does not expand.
    let literal = |word: &mut Vec<Piece>, cur: &mut String, c: char| {
        if !cur.is_empty() {
            word.push((std::mem::take(cur), true));
        }
        word.push((c.to_string(), false));
    };
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('\n') | None => {}
                Some(n) => {
                    started = true;
                    literal(&mut word, &mut cur, n);
                }
            },
            // `$(...)` (command substitution) stays one word, never evaluated.
            '$' if chars.peek() == Some(&'(') => {
                started = true;
                cur.push('$');
                let mut depth = 0usize;
                for n in chars.by_ref() {
                    cur.push(n);
                    match n {
                        '(' => depth += 1,
                        ')' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                }
            }
            '\'' => {
                started = true;
                if !cur.is_empty() {
                    word.push((std::mem::take(&mut cur), true));
                }
                let quoted: String = chars.by_ref().take_while(|c| *c != '\'').collect();
                word.push((quoted, false));
            }
            '"' => {
                started = true;
                while let Some(q) = chars.next() {
                    match q {
                        '"' => break,
                        '\\' if matches!(chars.peek(), Some('"' | '\\' | '$' | '\n')) => {
                            let n = chars.next().unwrap_or('\\');
                            if n != '\n' {
                                literal(&mut word, &mut cur, n);
                            }
                        }
                        _ => cur.push(q),
                    }
                }
            }
            '#' if !started => {
                for n in chars.by_ref() {
                    if n == '\n' {
                        out.push(Token::Break);
                        break;
                    }
                }
            }
            '\n' | ';' | '|' | '&' | '(' | ')' => {
                end_word(&mut word, &mut cur, &mut started, &mut out);
                out.push(Token::Break);
            }
            c if c.is_whitespace() => end_word(&mut word, &mut cur, &mut started, &mut out),
            c => {
                started = true;
                cur.push(c);
            }
        }
    }
    end_word(&mut word, &mut cur, &mut started, &mut out);
    out
}

/// Words of text that expands no further.
fn literal_words(text: &str) -> Vec<Token> {
    text.split_whitespace()
        .map(|w| Token::Word(vec![(w.to_owned(), false)]))
        .collect()
}

/// A value's pieces split at blanks into words, each piece keeping whether `$` expands in it.
fn split_words(pieces: &[Piece]) -> Vec<Vec<Piece>> {
    let mut words = Vec::new();
    let mut word: Vec<Piece> = Vec::new();
    for (text, expands) in pieces {
        let mut cur = String::new();
        for c in text.chars() {
            if c.is_whitespace() {
                if !cur.is_empty() {
                    word.push((std::mem::take(&mut cur), *expands));
                }
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            } else {
                cur.push(c);
            }
        }
        if !cur.is_empty() {
            word.push((cur, *expands));
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

fn raw(pieces: &[Piece]) -> String {
    pieces.iter().map(|(t, _)| t.as_str()).collect()
}

/// `NAME=value` (the value's pieces), `export` words aside.
fn assignment(pieces: &[Piece]) -> Option<(String, Vec<Piece>)> {
    let (first, expands) = pieces.first()?;
    let (name, _) = first.split_once('=')?;
    let ok = *expands
        && !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    if !ok {
        return None;
    }
    Some((
        name.to_owned(),
        drop_chars(pieces, name.chars().count() + 1),
    ))
}

/// The word without its first `n` characters (across pieces), the rest trimmed at the start.
fn drop_chars(pieces: &[Piece], mut n: usize) -> Vec<Piece> {
    let mut out = Vec::new();
    for (t, e) in pieces {
        let len = t.chars().count();
        if n >= len {
            n -= len;
            continue;
        }
        let rest: String = t.chars().skip(n).collect();
        n = 0;
        let rest = if out.is_empty() {
            rest.trim_start().to_owned()
        } else {
            rest
        };
        out.push((rest, *e));
    }
    out
}

/// The word with its variables expanded, or `None` where it needs what is not evaluated.
fn expand(pieces: &[Piece], vars: &Vars, used: &mut Vec<String>) -> Option<String> {
    expand_at(pieces, vars, used, 0)
}

/// [`expand`], `depth` defaults deep (`${A:-${B:-x}}`): bounded, so a hostile script cannot
/// exhaust the stack.
fn expand_at(
    pieces: &[Piece],
    vars: &Vars,
    used: &mut Vec<String>,
    depth: usize,
) -> Option<String> {
    if depth > 8 {
        return None;
    }
    let mut out = String::new();
    for (text, expands) in pieces {
        if !expands {
            out.push_str(text);
            continue;
        }
        let mut rest = text.as_str();
        while let Some(at) = rest.find('$') {
            out.push_str(&rest[..at]);
            let after = &rest[at + 1..];
            // `$((...))`: integer arithmetic over literals and assigned names.
            if after.starts_with("((") {
                let end = closing(after)?;
                let expr = after[..end].strip_prefix("((")?.strip_suffix("))")?;
                out.push_str(&Arith::eval(expr, vars, used)?.to_string());
                rest = &after[end..];
                continue;
            }
            let (name, default, len) = if let Some(inner) = after.strip_prefix('{') {
                let close = brace_close(inner)?;
                let body = &inner[..close];
                let (name, default) = match body.split_once(":-").or_else(|| body.split_once('-')) {
                    Some((n, d)) => (n, Some(d)),
                    None => (body, None),
                };
                (name, default, close + 2)
            } else {
                let n = after
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(after.len());
                (&after[..n], None, n)
            };
            // A positional parameter (`${3:-32768}`): the script is read without arguments.
            let positional = !name.is_empty() && name.chars().all(|c| c.is_ascii_digit());
            let is_name = !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit());
            if !is_name && !positional {
                return None;
            }
            match (vars.get(name), default) {
                (None, Some(d)) if positional => {
                    let d = expand_at(&[(d.to_owned(), true)], vars, used, depth + 1)?;
                    used.push(format!(
                        "launch script: its argument ${name} is not given here: its default {d}"
                    ));
                    out.push_str(&d);
                }
                (Some((Some(v), from)), _) => {
                    out.push_str(v);
                    used.extend(from.iter().cloned());
                }
                (Some((None, _)), _) => return None,
                (None, Some(d)) => {
                    let d = expand_at(&[(d.to_owned(), true)], vars, used, depth + 1)?;
                    used.push(format!(
                        "launch script: ${name} is not assigned in it (the environment is not read): its default {d}"
                    ));
                    out.push_str(&d);
                }
                (None, _) => return None,
            }
            rest = &after[len..];
        }
        out.push_str(rest);
    }
    Some(out)
}

/// The byte index of the `}` that closes a `${` whose body `s` begins (nested `${...}` inside).
fn brace_close(s: &str) -> Option<usize> {
    let mut depth = 1usize;
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// The byte index just past the `)` that closes `s`'s first `(`.
fn closing(s: &str) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// A flag's value as YAML would read it: an integer, a float, a boolean, else a string.
fn scalar(s: &str) -> Value {
    if let Ok(n) = s.parse::<u64>() {
        return Value::from(n);
    }
    if let Ok(n) = s.parse::<i64>() {
        return Value::from(n);
    }
    match s {
        "true" | "True" => return Value::Bool(true),
        "false" | "False" => return Value::Bool(false),
        _ => {}
    }
    match s.parse::<f64>() {
        Ok(f) if f.is_finite() => Value::from(f),
        _ => Value::String(s.to_owned()),
    }
}

#[cfg(test)]
mod tests;
