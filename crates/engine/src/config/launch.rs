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
//! Not read: the script's control flow (`if`, loops, functions): every flag in the file counts,
//! the last of a name winning, as argparse takes a repeated flag.

use std::collections::HashMap;
use std::path::Path;

use serde_json::{Map, Value};

use super::error::ConfigError;
use super::megatron::KNOWN_FIELDS;

/// Megatron's `store_true` flags that the engine reads: never followed by a value.
const SWITCHES: &[&str] = &[
    "group_query_attention",
    "swiglu",
    "multi_latent_attention",
    "enable_cuda_graph",
    "external_cuda_graph",
    "attention_output_gate",
    "selective_fp8",
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

/// The script's flags as a config mapping, and its notes (defaults it used).
pub(crate) fn fields(text: &str, file: &Path) -> Result<(Value, Vec<String>), ConfigError> {
    let tokens = tokens(text);
    let mut vars = Vars::new();
    let mut notes: Vec<String> = Vec::new();
    let mut out = Map::new();
    let mut i = 0;
    while i < tokens.len() {
        let Token::Word(pieces) = &tokens[i] else {
            i += 1;
            continue;
        };
        i += 1;
        let word = raw(pieces);
        if let Some((name, value)) = assignment(pieces) {
            let mut used = Vec::new();
            let v = expand(&value, &vars, &mut used);
            vars.insert(name, (v, used));
            continue;
        }
        let Some(flag) = word.strip_prefix("--").filter(|f| !f.is_empty()) else {
            continue;
        };
        // `--flag=value`, and `"--flag value"` quoted as one word (as arrays of strings hold
        // them, split when the array expands unquoted).
        let (name, value): (String, Option<Vec<Piece>>) =
            match flag.find(|c: char| c == '=' || c.is_whitespace()) {
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
        let mut used = Vec::new();
        let v = match value {
            None => Value::Bool(true),
            Some(p) => match expand(&p, &vars, &mut used) {
                Some(s) => {
                    // The defaults a field the engine reads took, once each.
                    if KNOWN_FIELDS.contains(&name.as_str()) {
                        for n in used.drain(..) {
                            if !notes.contains(&n) {
                                notes.push(n);
                            }
                        }
                    }
                    scalar(&s)
                }
                None if KNOWN_FIELDS.contains(&name.as_str()) => {
                    return Err(ConfigError::Field {
                        file: file.into(),
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
        out.insert(name, v);
    }
    Ok((Value::Object(out), notes))
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
                let close = inner.find('}')?;
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
            let is_name = !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit());
            if !is_name {
                return None;
            }
            match (vars.get(name), default) {
                (Some((Some(v), from)), _) => {
                    out.push_str(v);
                    used.extend(from.iter().cloned());
                }
                (Some((None, _)), _) => return None,
                (None, Some(d)) if !d.contains('$') => {
                    used.push(format!(
                        "launch script: ${name} is not assigned in it (the environment is not read): its default {d}"
                    ));
                    out.push_str(d);
                }
                (None, _) => return None,
            }
            rest = &after[len..];
        }
        out.push_str(rest);
    }
    Some(out)
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

/// Bash's `$((...))` on 64-bit integers: `+ - * / %`, parentheses, unary signs, literals and
/// names (`N`, `$N`, `${N}`) assigned a number above; `None` on anything else, on overflow and
/// on division by zero. Nesting is bounded, so a hostile script cannot exhaust the stack.
struct Arith<'a> {
    s: &'a [u8],
    at: usize,
    vars: &'a Vars,
    used: &'a mut Vec<String>,
    depth: usize,
}

impl Arith<'_> {
    fn eval(expr: &str, vars: &Vars, used: &mut Vec<String>) -> Option<i64> {
        let mut a = Arith {
            s: expr.as_bytes(),
            at: 0,
            vars,
            used,
            depth: 0,
        };
        let v = a.sum()?;
        a.skip_ws();
        (a.at == a.s.len()).then_some(v)
    }

    fn skip_ws(&mut self) {
        while self.s.get(self.at).is_some_and(u8::is_ascii_whitespace) {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.s.get(self.at).copied()
    }

    fn sum(&mut self) -> Option<i64> {
        let mut v = self.product()?;
        while let Some(op @ (b'+' | b'-')) = self.peek() {
            self.at += 1;
            let r = self.product()?;
            v = if op == b'+' {
                v.checked_add(r)?
            } else {
                v.checked_sub(r)?
            };
        }
        Some(v)
    }

    fn product(&mut self) -> Option<i64> {
        let mut v = self.unary()?;
        while let Some(op @ (b'*' | b'/' | b'%')) = self.peek() {
            self.at += 1;
            let r = self.unary()?;
            v = match op {
                b'*' => v.checked_mul(r)?,
                b'/' => v.checked_div(r)?,
                _ => v.checked_rem(r)?,
            };
        }
        Some(v)
    }

    fn unary(&mut self) -> Option<i64> {
        self.depth += 1;
        if self.depth > 64 {
            return None;
        }
        let v = match self.peek()? {
            b'-' => {
                self.at += 1;
                self.unary()?.checked_neg()
            }
            b'+' => {
                self.at += 1;
                self.unary()
            }
            b'(' => {
                self.at += 1;
                let v = self.sum()?;
                (self.peek()? == b')').then(|| self.at += 1)?;
                Some(v)
            }
            _ => self.atom(),
        };
        self.depth -= 1;
        v
    }

    fn atom(&mut self) -> Option<i64> {
        let start = self.at;
        let word = |c: &u8| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'$' | b'{' | b'}');
        while self.s.get(self.at).is_some_and(word) {
            self.at += 1;
        }
        let tok = std::str::from_utf8(&self.s[start..self.at]).ok()?;
        if let Ok(n) = tok.parse::<i64>() {
            return Some(n);
        }
        let name = tok.strip_prefix('$').unwrap_or(tok);
        let name = name
            .strip_prefix('{')
            .and_then(|n| n.strip_suffix('}'))
            .unwrap_or(name);
        let (value, from) = self.vars.get(name)?;
        self.used.extend(from.iter().cloned());
        value.as_deref()?.trim().parse().ok()
    }
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
mod tests {
    use super::*;

    fn read(text: &str) -> Result<(Value, Vec<String>), ConfigError> {
        fields(text, Path::new("train.sh"))
    }

    #[test]
    fn the_flags_of_a_launch_script_are_its_fields() {
        let (v, notes) = read(
            r#"#!/bin/bash
# Llama-3-8B
TP=2
export SEQ=${SEQ_LEN:-4096}
GPT_MODEL_ARGS=(
    --num-layers 32   # the depth
    --hidden-size=4096
    --ffn-hidden-size "14336" \
    --num-attention-heads 32 --group-query-attention --num-query-groups 8
    --swiglu
    --normalization RMSNorm
    --moe-layer-freq '([0]*3+[1]*29)'
)
torchrun $DISTRIBUTED_ARGS pretrain_gpt.py ${GPT_MODEL_ARGS[@]} \
    --tensor-model-parallel-size $TP --seq-length ${SEQ} --data-path $(cat paths.txt) --use-mcore-models
"#,
        )
        .unwrap();
        let want = serde_json::json!({"num_layers": 32, "hidden_size": 4096,
            "ffn_hidden_size": 14336, "num_attention_heads": 32, "group_query_attention": true,
            "num_query_groups": 8, "swiglu": true, "normalization": "RMSNorm",
            "moe_layer_freq": "([0]*3+[1]*29)", "tensor_model_parallel_size": 2,
            "seq_length": 4096, "data_path": "$(cat paths.txt)", "use_mcore_models": true});
        assert_eq!(v, want);
        assert_eq!(notes.len(), 1);
        assert!(
            notes[0].contains("$SEQ_LEN") && notes[0].contains("4096"),
            "{notes:?}"
        );
    }

    #[test]
    fn a_field_the_engine_reads_with_a_value_it_cannot_evaluate_is_refused_naming_the_flag() {
        for script in [
            "--num-layers $NUM_LAYERS",
            "--hidden-size $(python -c 'print(4096)')",
            "--seq-length ${SEQ:-$DEFAULT}",
            "X=$1\n--num-attention-heads $X",
        ] {
            let e = read(script).unwrap_err().to_string();
            assert!(
                e.contains("train.sh") && e.contains("does not evaluate"),
                "{script}: {e}"
            );
        }
    }

    #[test]
    fn single_quotes_keep_dollars_and_a_switch_never_takes_the_next_word() {
        let (v, _) = read("--swiglu '$x' --normalization '$y'").unwrap();
        assert_eq!(v["swiglu"], true);
        assert_eq!(v["normalization"], "$y");
        let (v, _) = read("A=1\nA=2\n--num-layers $A --num-layers=${A}0").unwrap();
        assert_eq!(v["num_layers"], 20);
    }

    #[test]
    fn arithmetic_and_flags_quoted_with_their_values_read_as_bash_runs_them() {
        // `**` is not among the operators: refused, naming the flag.
        let e = read("N=16\n--hidden-size $(( (N + 2) * 2 ** 1 ))").unwrap_err();
        assert!(e.to_string().contains("hidden_size"), "{e}");
        let (v, _) = read(
            "N=16\nM=$(($N-1))\nARGS=(\"--seq-length 2048\" \"--fp8-format hybrid\")\n\
             --moe-layer-freq \"([0]+[1]*$M)\" --hidden-size $(( (N + 2) * -${N} / 4 % 7 ))",
        )
        .unwrap();
        assert_eq!(v["moe_layer_freq"], "([0]+[1]*15)");
        assert_eq!(v["seq_length"], 2048);
        assert_eq!(v["fp8_format"], "hybrid");
        assert_eq!(v["hidden_size"], (18 * -16 / 4) % 7);
        for bad in [
            "$((1/0))",
            "$((9223372036854775807+1))",
            "$((((((1))))\")",
            "$((x))",
        ] {
            assert!(read(&format!("--num-layers {bad}")).is_err(), "{bad}");
        }
        let deep = format!("--num-layers $(({}1{}))", "(".repeat(200), ")".repeat(200));
        assert!(read(&deep).is_err());
    }
}
