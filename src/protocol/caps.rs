//! Client capabilities: what a 2026-07-28 request declares, how that is said in each legacy
//! `initialize`, and the fingerprint that keys upstream sessions.

use serde_json::{Map, Value, json};

/// The client capabilities that matter to the bridge, as declared by one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Declared {
    pub elicitation_form: bool,
    pub elicitation_url: bool,
    pub sampling: bool,
    pub roots: bool,
}

impl Declared {
    /// Reads a 2026-07-28 `clientCapabilities` object. `elicitation: {}` means form mode.
    pub fn from_modern(caps: &Map<String, Value>) -> Declared {
        let (form, url) = match caps.get("elicitation").and_then(Value::as_object) {
            Some(e) if e.is_empty() => (true, false),
            Some(e) => (e.contains_key("form"), e.contains_key("url")),
            None => (false, false),
        };
        Declared {
            elicitation_form: form,
            elicitation_url: url,
            sampling: caps.get("sampling").is_some_and(Value::is_object),
            roots: caps.get("roots").is_some_and(Value::is_object),
        }
    }

    /// What both sets declare.
    pub fn intersect(&self, other: &Declared) -> Declared {
        Declared {
            elicitation_form: self.elicitation_form && other.elicitation_form,
            elicitation_url: self.elicitation_url && other.elicitation_url,
            sampling: self.sampling && other.sampling,
            roots: self.roots && other.roots,
        }
    }

    /// True when a call from this client may push input requests (so it needs a session of its own).
    pub fn is_interactive(&self) -> bool {
        self.elicitation_form || self.elicitation_url || self.sampling || self.roots
    }

    /// A small stable number naming this capability set; part of the upstream session key.
    pub fn fingerprint(&self) -> u8 {
        u8::from(self.elicitation_form)
            | (u8::from(self.elicitation_url) << 1)
            | (u8::from(self.sampling) << 2)
            | (u8::from(self.roots) << 3)
    }

    /// What a session negotiated at `version` can actually carry of this set.
    pub fn at_version(&self, version: &str) -> Declared {
        match version {
            "2025-11-25" => *self,
            "2025-06-18" => Declared {
                elicitation_url: false,
                ..*self
            },
            _ => Declared {
                elicitation_form: false,
                elicitation_url: false,
                ..*self
            },
        }
    }

    /// The `capabilities` object for a legacy `initialize` requesting `version`.
    pub fn to_legacy(&self, version: &str, modern: &Map<String, Value>) -> Value {
        let usable = self.at_version(version);
        let mut out = Map::new();
        if usable.roots {
            out.insert("roots".into(), json!({"listChanged": false}));
        }
        if usable.sampling {
            // 2025-11-25 sampling sub-capabilities (context, tools) keep their shape.
            let sampling = match version {
                "2025-11-25" => modern.get("sampling").cloned().unwrap_or(json!({})),
                _ => json!({}),
            };
            out.insert("sampling".into(), sampling);
        }
        if usable.elicitation_form || usable.elicitation_url {
            let elicitation = if version == "2025-11-25" {
                let mut e = Map::new();
                if usable.elicitation_form {
                    e.insert("form".into(), json!({}));
                }
                if usable.elicitation_url {
                    e.insert("url".into(), json!({}));
                }
                Value::Object(e)
            } else {
                json!({})
            };
            out.insert("elicitation".into(), elicitation);
        }
        Value::Object(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn empty_elicitation_object_means_form_mode() {
        let d = Declared::from_modern(&caps(json!({"elicitation": {}})));
        assert!(d.elicitation_form && !d.elicitation_url);
        let d = Declared::from_modern(&caps(json!({"elicitation": {"url": {}}})));
        assert!(!d.elicitation_form && d.elicitation_url);
    }

    #[test]
    fn legacy_shapes_follow_the_version() {
        let all = Declared {
            elicitation_form: true,
            elicitation_url: true,
            sampling: true,
            roots: true,
        };
        let m = Map::new();
        assert_eq!(
            all.to_legacy("2025-11-25", &m),
            json!({"roots": {"listChanged": false}, "sampling": {}, "elicitation": {"form": {}, "url": {}}})
        );
        assert_eq!(
            all.to_legacy("2025-06-18", &m),
            json!({"roots": {"listChanged": false}, "sampling": {}, "elicitation": {}})
        );
        assert_eq!(
            all.to_legacy("2024-11-05", &m),
            json!({"roots": {"listChanged": false}, "sampling": {}})
        );
    }

    #[test]
    fn fingerprints_differ_per_capability_set() {
        let a = Declared {
            sampling: true,
            ..Default::default()
        };
        let b = Declared {
            roots: true,
            ..Default::default()
        };
        assert_ne!(a.fingerprint(), b.fingerprint());
        assert_eq!(Declared::default().fingerprint(), 0);
    }
}
