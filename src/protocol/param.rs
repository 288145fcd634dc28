//! `Mcp-Param-{Name}` headers (2026-07-28 Streamable HTTP, "Custom Headers from Tool
//! Parameters"): which arguments a tool's `inputSchema` mirrors into headers (`x-mcp-header`),
//! and whether a `tools/call`'s headers carry exactly those arguments ("Server Validation").
//! The face collects the headers ([`Headers`]); the engine, which knows the tool's schema,
//! checks them ([`check`]).

use super::header::decode_value;
use http::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Number, Value};

/// What every `Mcp-Param-{Name}` header name starts with, lowercase as `http` keeps names.
const PREFIX: &str = "mcp-param-";

/// One argument a tool mirrors into a header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mirror {
    /// The `x-mcp-header` value: the header is `Mcp-Param-{name}`, whatever its case.
    name: String,
    /// The `properties` keys from the schema's root to the argument.
    path: Vec<String>,
}

impl Mirror {
    fn header(&self) -> String {
        format!("Mcp-Param-{}", self.name)
    }

    fn argument(&self) -> String {
        format!("params.arguments.{}", self.path.join("."))
    }
}

/// The arguments `input_schema` mirrors into headers. Only an annotation reached from the root
/// through `properties` alone counts, and only one whose value is an HTTP token: anything else
/// makes the tool invalid, which a conforming client leaves out of its list ("Schema
/// Extension"), so no call of it can carry such a header. The walk is as deep as the backend's
/// message, whose nesting `limits.max_json_depth` bounds.
pub fn mirrors(input_schema: &Value) -> Vec<Mirror> {
    let mut found = Vec::new();
    walk(input_schema, &mut Vec::new(), &mut found);
    found
}

fn walk(schema: &Value, path: &mut Vec<String>, found: &mut Vec<Mirror>) {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    for (key, property) in properties {
        path.push(key.clone());
        let name = property.get("x-mcp-header").and_then(Value::as_str);
        if let Some(name) = name.filter(|n| is_token(n)) {
            found.push(Mirror {
                name: name.to_owned(),
                path: path.clone(),
            });
        }
        walk(property, path, found);
        path.pop();
    }
}

/// RFC 9110 section 5.6.2: `token = 1*tchar`.
fn is_token(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// A request's `Mcp-Param-*` headers: the name after the prefix (lowercase) and the value as
/// sent. As many as the listener lets a request head carry.
#[derive(Debug, Default)]
pub struct Headers(Vec<(String, HeaderValue)>);

impl Headers {
    pub fn from_request(headers: &HeaderMap) -> Headers {
        let params = headers.iter().filter_map(|(name, value)| {
            let name = name.as_str().strip_prefix(PREFIX)?;
            // Copied: the value shares the connection's read buffer, which a parked call
            // would otherwise keep alive.
            let value = HeaderValue::from_bytes(value.as_bytes()).ok()?;
            Some((name.to_owned(), value))
        });
        Headers(params.collect())
    }

    /// Every header as it was sent, for a backend that reads them itself.
    pub fn iter(&self) -> impl Iterator<Item = (HeaderName, &HeaderValue)> {
        self.0.iter().filter_map(|(name, value)| {
            let name = HeaderName::from_bytes(format!("{PREFIX}{name}").as_bytes()).ok()?;
            Some((name, value))
        })
    }

    /// The values sent under `Mcp-Param-{name}`, its name compared without case.
    fn sent(&self, name: &str) -> impl Iterator<Item = &HeaderValue> {
        self.0
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }
}

/// Checks that `headers` mirror `arguments` as `mirrors` declare (2026-07-28 Streamable HTTP,
/// "Server Behavior for Custom Headers" and "Server Validation"): an argument present (and not
/// null) needs its header, once, well-formed, and equal to it; an absent one needs none, and a
/// header sent for it matches nothing. Headers no mirror declares are not looked at. The error
/// names the header and what is wrong, never the value sent.
pub fn check(
    mirrors: &[Mirror],
    headers: &Headers,
    arguments: Option<&Value>,
) -> Result<(), String> {
    mirrors
        .iter()
        .try_for_each(|mirror| check_one(mirror, headers, arguments))
}

fn check_one(mirror: &Mirror, headers: &Headers, arguments: Option<&Value>) -> Result<(), String> {
    let header = mirror.header();
    let mut sent = headers.sent(&mirror.name);
    let raw = sent.next();
    if sent.next().is_some() {
        return Err(format!("{header} header appears more than once"));
    }
    let value = arguments
        .and_then(|a| mirror.path.iter().try_fold(a, |v, key| v.get(key)))
        .filter(|v| !v.is_null());
    match (value, raw) {
        (None, None) => Ok(()),
        (None, Some(_)) => Err(format!(
            "{header} header is sent but {} is absent",
            mirror.argument()
        )),
        (Some(_), None) => Err(format!(
            "{header} header is required: {} is present",
            mirror.argument()
        )),
        (Some(value), Some(raw)) => {
            let text = raw.to_str().ok().and_then(decode_value).ok_or_else(|| {
                format!(
                    "{header} header has invalid characters or a malformed =?base64?...?= value"
                )
            })?;
            if matches(value, &text) {
                Ok(())
            } else {
                Err(format!(
                    "{header} header does not match {}",
                    mirror.argument()
                ))
            }
        }
    }
}

/// Whether a header's decoded text carries the body's value ("Value Encoding"): a string as it
/// is, a boolean as `true` or `false`, a number compared as a number ("Server Validation": `42`
/// and `42.0` are equal). An object or an array no header can carry.
fn matches(body: &Value, text: &str) -> bool {
    match body {
        Value::String(s) => s == text,
        Value::Bool(b) => text == if *b { "true" } else { "false" },
        Value::Number(n) => same_number(n, text),
        _ => false,
    }
}

/// Integers exactly when both sides are integers (past 2^53 a float would round), else as
/// floats.
fn same_number(body: &Number, text: &str) -> bool {
    if let (Some(a), Ok(b)) = (body.as_i64(), text.parse::<i64>()) {
        return a == b;
    }
    if let (Some(a), Ok(b)) = (body.as_u64(), text.parse::<u64>()) {
        return a == b;
    }
    match (body.as_f64(), text.parse::<f64>()) {
        (Some(a), Ok(b)) => a == b,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "shard": {"type": "integer", "x-mcp-header": "Shard"},
            "dry": {"type": "boolean", "x-mcp-header": "Dry"},
            "target": {"type": "object", "properties": {
                "tenant": {"type": "string", "x-mcp-header": "Tenant"},
            }},
            "list": {"type": "array", "items": {"type": "object", "properties": {
                "x": {"type": "string", "x-mcp-header": "X"},
            }}},
            "one": {"oneOf": [{"type": "string", "x-mcp-header": "One"}]},
            "bad": {"type": "string", "x-mcp-header": "Bad Name"},
            "empty": {"type": "string", "x-mcp-header": ""},
            "plain": {"type": "string"},
        }})
    }

    fn headers(pairs: &[(&str, &str)]) -> Headers {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                http::HeaderName::from_bytes(format!("mcp-param-{name}").as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map.append("mcp-name", HeaderValue::from_static("t"));
        Headers::from_request(&map)
    }

    fn run(args: Value, pairs: &[(&str, &str)]) -> Result<(), String> {
        check(&mirrors(&schema()), &headers(pairs), Some(&args))
    }

    #[test]
    fn mirrors_are_the_token_annotations_reached_through_properties_alone() {
        let mut found: Vec<(String, String)> = mirrors(&schema())
            .into_iter()
            .map(|m| (m.name, m.path.join(".")))
            .collect();
        found.sort();
        let expected = [
            ("Dry", "dry"),
            ("Region", "region"),
            ("Shard", "shard"),
            ("Tenant", "target.tenant"),
        ];
        let expected: Vec<(String, String)> = expected
            .iter()
            .map(|(n, p)| ((*n).to_owned(), (*p).to_owned()))
            .collect();
        assert_eq!(found, expected);
        assert!(mirrors(&json!({"type": "object"})).is_empty());
        assert!(is_token("Dry-Run_2.x~"));
        assert!(!is_token("a:b") && !is_token("a\r") && !is_token("é"));
    }

    #[test]
    fn present_arguments_need_equal_headers_and_absent_ones_none() {
        assert_eq!(run(json!({}), &[]), Ok(()));
        assert_eq!(run(json!({"region": null, "plain": "p"}), &[]), Ok(()));
        assert_eq!(run(json!({"region": "eu"}), &[("region", "eu")]), Ok(()));
        assert_eq!(run(json!({"region": "eu"}), &[("REGION", "eu")]), Ok(()));
        let missing = run(json!({"region": "eu"}), &[]).unwrap_err();
        assert_eq!(
            missing,
            "Mcp-Param-Region header is required: params.arguments.region is present"
        );
        let stray = run(json!({}), &[("Tenant", "acme")]).unwrap_err();
        assert_eq!(
            stray,
            "Mcp-Param-Tenant header is sent but params.arguments.target.tenant is absent"
        );
        let other = run(json!({"region": "eu"}), &[("Region", "EU")]).unwrap_err();
        assert_eq!(
            other,
            "Mcp-Param-Region header does not match params.arguments.region"
        );
        let twice = run(
            json!({"region": "eu"}),
            &[("Region", "eu"), ("region", "eu")],
        );
        assert_eq!(
            twice.unwrap_err(),
            "Mcp-Param-Region header appears more than once"
        );
        // Headers no annotation declares, and arguments none mirrors, are not looked at.
        assert_eq!(
            run(json!({"plain": "p"}), &[("Plain", "q"), ("X", "!")]),
            Ok(())
        );
        assert_eq!(
            check(&mirrors(&schema()), &headers(&[]), None),
            Ok(()),
            "no arguments at all"
        );
    }

    #[test]
    fn values_compare_by_the_body_type() {
        assert!(matches(&json!("42"), "42"));
        assert!(!matches(&json!("42"), "42.0"));
        assert!(matches(&json!(42), "42"));
        assert!(matches(&json!(42), "42.0"));
        assert!(matches(&json!(-7), "-7"));
        assert!(matches(&json!(42.0), "42"));
        assert!(!matches(&json!(42), "43"));
        assert!(!matches(&json!(42), "forty-two"));
        assert!(!matches(
            &json!(9_007_199_254_740_993_u64),
            "9007199254740992"
        ));
        assert!(matches(&json!(u64::MAX), &u64::MAX.to_string()));
        assert!(matches(&json!(true), "true"));
        assert!(matches(&json!(false), "false"));
        assert!(!matches(&json!(true), "True"));
        assert!(!matches(&json!(true), "1"));
        assert!(!matches(&json!({"a": 1}), "{\"a\":1}"));
        assert!(!matches(&json!([1]), "[1]"));
    }

    #[test]
    fn header_values_are_decoded_before_they_are_compared() {
        let args = json!({"region": "Hello, 世界", "shard": 3, "dry": true});
        let ok = [
            ("Region", "=?base64?SGVsbG8sIOS4lueVjA==?="),
            ("Shard", "=?base64?Mw==?="),
            ("Dry", "true"),
        ];
        assert_eq!(run(args.clone(), &ok), Ok(()));
        let padding = [("Region", "=?base64?SGVsbG8sIOS4lueVjA?="), ok[1], ok[2]];
        let malformed = run(args.clone(), &padding).unwrap_err();
        assert_eq!(
            malformed,
            "Mcp-Param-Region header has invalid characters or a malformed =?base64?...?= value"
        );
        let alphabet = [("Region", "=?base64?SGVsbG8s*OS4lueVjA==?="), ok[1], ok[2]];
        assert!(run(args.clone(), &alphabet).is_err());
        let mut map = HeaderMap::new();
        map.append(
            "mcp-param-region",
            HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap(),
        );
        let raw_utf8 = check(
            &mirrors(&schema()),
            &Headers::from_request(&map),
            Some(&json!({"region": "café"})),
        );
        assert!(raw_utf8.unwrap_err().contains("invalid characters"));
    }
}
