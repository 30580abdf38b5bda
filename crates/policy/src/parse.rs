//! Reading a policy from JSON with a path for every error.
//!
//! We walk a `serde_json::Value` by hand instead of deriving `Deserialize`: a derive reports
//! "invalid type at line 3" while users need `rules.row.fc2[1].tp` and a fix.

use std::path::Path;

use serde_json::{Map, Value};

use crate::error::{PolicyError, Problem};
use crate::kind::{KindFamily, ModuleKind};
use crate::policy::{DenseRule, GroupedRule, POLICY_VERSION, Policy, check_ratio};
use crate::rule_key::RuleKey;
use crate::threshold::Threshold;

pub(crate) fn parse_str(text: &str, file: &Path) -> Result<Policy, PolicyError> {
    if text.trim().is_empty() {
        return Err(PolicyError::Empty { file: file.into() });
    }
    let value: Value = serde_json::from_str(text).map_err(|e| PolicyError::NotJson {
        file: file.into(),
        line: e.line(),
        column: e.column(),
        message: explain_syntax(text, &e),
    })?;
    if let Some(d) = crate::dupkeys::first_duplicate(text) {
        let (parent, key) = d.path.rsplit_once('.').unwrap_or(("$", &d.path));
        return Err(PolicyError::Invalid {
            file: file.into(),
            path: d.path.clone(),
            problem: Problem::DuplicateKey {
                key: key.to_owned(),
                parent: parent.to_owned(),
                first: d.first,
                second: d.second,
            },
        });
    }
    Parser { file }.policy(&value)
}

/// The parser's message without its position (we report that separately), with a plainer
/// word for the non-numbers Python's `json` module writes.
fn explain_syntax(text: &str, e: &serde_json::Error) -> String {
    let at = text
        .lines()
        .nth(e.line().saturating_sub(1))
        .and_then(|l| l.get(e.column().saturating_sub(1)..))
        .unwrap_or("");
    let at = at.trim_start_matches('-');
    if at.starts_with("NaN") || at.starts_with("Infinity") {
        return "NaN and Infinity are not numbers a policy may hold (a speedup must be a \
                finite number above 0)"
            .to_owned();
    }
    let msg = e.to_string();
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_owned(),
        None => msg,
    }
}

struct Parser<'a> {
    file: &'a Path,
}

impl Parser<'_> {
    fn err(&self, path: &str, problem: Problem) -> PolicyError {
        PolicyError::Invalid {
            file: self.file.into(),
            path: path.to_owned(),
            problem,
        }
    }

    fn object<'v>(&self, v: &'v Value, path: &str) -> Result<&'v Map<String, Value>, PolicyError> {
        v.as_object()
            .ok_or_else(|| self.err(path, wrong_type("an object", v)))
    }

    fn policy(&self, root: &Value) -> Result<Policy, PolicyError> {
        let top = self.object(root, "$")?;
        let version = top
            .get("version")
            .ok_or_else(|| self.err("$", Problem::MissingKey("version")))?;
        if version.as_u64() != Some(u64::from(POLICY_VERSION)) {
            return Err(self.err("version", Problem::UnsupportedVersion(version.to_string())));
        }
        let threshold = top
            .get("speedup_threshold")
            .ok_or_else(|| self.err("$", Problem::MissingKey("speedup_threshold")))?;
        let threshold = self.ratio(threshold, "speedup_threshold")?;
        let mut policy = Policy::new(threshold).map_err(|_| {
            self.err(
                "speedup_threshold",
                Problem::BadRatio(threshold.to_string()),
            )
        })?;
        let rules = top
            .get("rules")
            .ok_or_else(|| self.err("$", Problem::MissingKey("rules")))?;
        let rules = self.object(rules, "rules")?;
        for (kind_name, body) in rules {
            let path = format!("rules.{kind_name}");
            let kind: ModuleKind = kind_name
                .parse()
                .map_err(|_| self.err(&path, Problem::UnknownKind(kind_name.clone())))?;
            match kind.family() {
                KindFamily::Dense(dk) => {
                    let by_ub = match body {
                        Value::Array(_) => {
                            return Err(self.err(&path, Problem::FlatDenseList(kind_name.clone())));
                        }
                        other => self.object(other, &path)?,
                    };
                    for (ub, list) in by_ub {
                        let ub_path = format!("{path}.{ub}");
                        if ub.is_empty() {
                            return Err(self.err(&ub_path, Problem::EmptyUbName));
                        }
                        for (i, item) in self.array(list, &ub_path)?.iter().enumerate() {
                            let rp = format!("{ub_path}[{i}]");
                            let rule = self.dense_rule(item, &rp)?;
                            let key = RuleKey::Dense {
                                kind: dk,
                                ub_name: ub.clone(),
                                tp: rule.tp,
                            };
                            policy.add_dense_rule(dk, ub, rule).map_err(|_| {
                                self.duplicate(&rp, key, list, |v| v.get("tp") == item.get("tp"))
                            })?;
                        }
                    }
                }
                KindFamily::Grouped(gk) => {
                    let list = match body {
                        Value::Array(a) => a,
                        _ => {
                            return Err(self.err(&path, Problem::GroupedNotList(kind_name.clone())));
                        }
                    };
                    for (i, item) in list.iter().enumerate() {
                        let rp = format!("{path}[{i}]");
                        let rule = self.grouped_rule(item, &rp)?;
                        let key = RuleKey::Grouped {
                            kind: gk,
                            etp: rule.etp,
                            num_gemms: rule.num_gemms,
                        };
                        policy.add_grouped_rule(gk, rule).map_err(|_| {
                            self.duplicate(&rp, key, body, |v| {
                                v.get("etp") == item.get("etp")
                                    && v.get("num_gemms") == item.get("num_gemms")
                            })
                        })?;
                    }
                }
            }
        }
        for (k, v) in top {
            match k.as_str() {
                "version" | "speedup_threshold" | "rules" => {}
                // Ours when it reads as ours; another tool's is kept as it is.
                "recipes" => {
                    let plan = crate::RecipePlan::from_value(v)
                        .map_err(|(path, m)| self.err(&path, Problem::RecipePlan(m)))?;
                    policy.recipes = Some(plan);
                }
                "provenance" => match serde_json::from_value(v.clone()) {
                    Ok(p) => policy.provenance = Some(p),
                    Err(_) => {
                        policy.extra.insert(k.clone(), v.clone());
                    }
                },
                _ => {
                    policy.extra.insert(k.clone(), v.clone());
                }
            }
        }
        Ok(policy)
    }

    /// Builds the duplicate-rule error, pointing at the first rule that had the same key.
    fn duplicate(
        &self,
        path: &str,
        key: RuleKey,
        list: &Value,
        same: impl Fn(&Value) -> bool,
    ) -> PolicyError {
        let base = path.rsplit_once('[').map_or(path, |(b, _)| b);
        let first = list
            .as_array()
            .and_then(|a| a.iter().position(same))
            .map_or_else(|| base.to_owned(), |i| format!("{base}[{i}]"));
        self.err(
            path,
            Problem::Duplicate {
                key: key.to_string(),
                first,
            },
        )
    }

    fn array<'v>(&self, v: &'v Value, path: &str) -> Result<&'v Vec<Value>, PolicyError> {
        v.as_array()
            .ok_or_else(|| self.err(path, wrong_type("a list of rules", v)))
    }

    fn dense_rule(&self, v: &Value, path: &str) -> Result<DenseRule, PolicyError> {
        let obj = self.object(v, path)?;
        self.known_keys(
            obj,
            path,
            &["tp", "min_tokens", "min_tokens_graphed", "measured_speedup"],
        )?;
        Ok(DenseRule {
            tp: self.size(obj, "tp", path)?,
            min_tokens: Threshold::from_wire(self.count(obj, "min_tokens", path)?),
            min_tokens_graphed: self
                .opt_count(obj, "min_tokens_graphed", path)?
                .map(Threshold::from_wire),
            measured_speedup: self.opt_ratio(obj, "measured_speedup", path)?,
        })
    }

    fn grouped_rule(&self, v: &Value, path: &str) -> Result<GroupedRule, PolicyError> {
        let obj = self.object(v, path)?;
        self.known_keys(
            obj,
            path,
            &[
                "etp",
                "num_gemms",
                "min_tokens",
                "min_tokens_graphed",
                "measured_speedup",
            ],
        )?;
        Ok(GroupedRule {
            etp: self.size(obj, "etp", path)?,
            num_gemms: self.size(obj, "num_gemms", path)?,
            min_tokens: Threshold::from_wire(self.count(obj, "min_tokens", path)?),
            min_tokens_graphed: self
                .opt_count(obj, "min_tokens_graphed", path)?
                .map(Threshold::from_wire),
            measured_speedup: self.opt_ratio(obj, "measured_speedup", path)?,
        })
    }

    fn known_keys(
        &self,
        obj: &Map<String, Value>,
        path: &str,
        known: &[&str],
    ) -> Result<(), PolicyError> {
        match obj.keys().find(|k| !known.contains(&k.as_str())) {
            Some(k) => Err(self.err(&format!("{path}.{k}"), Problem::UnknownRuleKey(k.clone()))),
            None => Ok(()),
        }
    }

    fn count(
        &self,
        obj: &Map<String, Value>,
        key: &'static str,
        path: &str,
    ) -> Result<u64, PolicyError> {
        let p = format!("{path}.{key}");
        let v = obj
            .get(key)
            .ok_or_else(|| self.err(path, Problem::MissingKey(key)))?;
        match v {
            Value::Number(n) => {
                if let Some(u) = n.as_u64() {
                    Ok(u)
                } else if let Some(f) = n.as_f64() {
                    // Integral floats (16384.0) are what some JSON writers emit for integers;
                    // the seed's loader compares them numerically, so we accept them too.
                    if f >= 0.0 && f.fract() == 0.0 && f <= 9_007_199_254_740_992.0 {
                        Ok(f as u64)
                    } else {
                        Err(self.err(&p, Problem::NotACount(n.to_string())))
                    }
                } else {
                    Err(self.err(&p, Problem::NotACount(n.to_string())))
                }
            }
            other => Err(self.err(&p, wrong_type("a non-negative integer", other))),
        }
    }

    fn size(
        &self,
        obj: &Map<String, Value>,
        key: &'static str,
        path: &str,
    ) -> Result<u32, PolicyError> {
        let n = self.count(obj, key, path)?;
        let p = format!("{path}.{key}");
        match u32::try_from(n) {
            Ok(0) => Err(self.err(&p, Problem::Zero)),
            Ok(v) => Ok(v),
            Err(_) => Err(self.err(&p, Problem::OutOfRange(n.to_string()))),
        }
    }

    fn ratio(&self, v: &Value, path: &str) -> Result<f64, PolicyError> {
        let x = v
            .as_f64()
            .ok_or_else(|| self.err(path, wrong_type("a number", v)))?;
        check_ratio(x).map_err(|p| self.err(path, p))?;
        Ok(x)
    }

    /// A count that may be absent; present, it is checked as `min_tokens` is.
    fn opt_count(
        &self,
        obj: &Map<String, Value>,
        key: &'static str,
        path: &str,
    ) -> Result<Option<u64>, PolicyError> {
        if obj.contains_key(key) {
            self.count(obj, key, path).map(Some)
        } else {
            Ok(None)
        }
    }

    fn opt_ratio(
        &self,
        obj: &Map<String, Value>,
        key: &str,
        path: &str,
    ) -> Result<Option<f64>, PolicyError> {
        obj.get(key)
            .map(|v| self.ratio(v, &format!("{path}.{key}")))
            .transpose()
    }
}

fn wrong_type(expected: &'static str, found: &Value) -> Problem {
    let found = match found {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => format!("boolean {b}"),
        Value::Number(n) => format!("number {n}"),
        Value::String(s) => format!("string {s:?}"),
        Value::Array(_) => "a list".to_owned(),
        Value::Object(_) => "an object".to_owned(),
    };
    Problem::WrongType { expected, found }
}
