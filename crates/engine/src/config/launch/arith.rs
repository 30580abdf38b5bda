//! Bash's `$((...))`, as a launch script computes a layer count or a layout.

use super::Vars;

/// Bash's `$((...))` on 64-bit integers: `+ - * / %`, parentheses, unary signs, literals and
/// names (`N`, `$N`, `${N}`) assigned a number above; `None` on anything else, on overflow and
/// on division by zero. Nesting is bounded, so a hostile script cannot exhaust the stack.
pub(super) struct Arith<'a> {
    s: &'a [u8],
    at: usize,
    vars: &'a Vars,
    used: &'a mut Vec<String>,
    depth: usize,
}

impl Arith<'_> {
    pub(super) fn eval(expr: &str, vars: &Vars, used: &mut Vec<String>) -> Option<i64> {
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
