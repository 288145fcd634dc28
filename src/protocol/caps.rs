//! Client capabilities: what a 2026-07-28 request declares, how that is said in each legacy
//! `initialize`, and the fingerprint that keys upstream sessions.

use serde_json::{Map, Value, json};

/// The client capabilities that matter to the bridge, as declared by one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Declared {
    pub elicitation_form: bool,
    pub elicitation_url: bool,
    pub sampling: bool,
    /// `sampling.tools`: sampling requests may carry `tools` and `toolChoice`.
    pub sampling_tools: bool,
    /// `sampling.context`: sampling requests may ask to include other context (deprecated).
    pub sampling_context: bool,
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
        let sampling = caps.get("sampling").and_then(Value::as_object);
        let sub = |name: &str| sampling.is_some_and(|s| s.get(name).is_some_and(Value::is_object));
        Declared {
            elicitation_form: form,
            elicitation_url: url,
            sampling: sampling.is_some(),
            sampling_tools: sub("tools"),
            sampling_context: sub("context"),
            roots: caps.get("roots").is_some_and(Value::is_object),
        }
    }

    /// What both sets declare.
    pub fn intersect(&self, other: &Declared) -> Declared {
        Declared {
            elicitation_form: self.elicitation_form && other.elicitation_form,
            elicitation_url: self.elicitation_url && other.elicitation_url,
            sampling: self.sampling && other.sampling,
            sampling_tools: self.sampling_tools && other.sampling_tools,
            sampling_context: self.sampling_context && other.sampling_context,
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
            | (u8::from(self.sampling_tools) << 4)
            | (u8::from(self.sampling_context) << 5)
    }

    /// What a session negotiated at `version` can actually carry of this set.
    pub fn at_version(&self, version: &str) -> Declared {
        match version {
            "2025-11-25" => *self,
            // Sampling's sub-capabilities came with 2025-11-25, as did URL elicitation.
            "2025-06-18" => Declared {
                elicitation_url: false,
                sampling_tools: false,
                sampling_context: false,
                ..*self
            },
            _ => Declared {
                elicitation_form: false,
                elicitation_url: false,
                sampling_tools: false,
                sampling_context: false,
                ..*self
            },
        }
    }

    /// The `capabilities` object for a legacy `initialize` requesting `version`: what this set
    /// declares and nothing else, so that sessions with the same fingerprint told their backend
    /// the same thing.
    pub fn to_legacy(&self, version: &str) -> Value {
        let usable = self.at_version(version);
        let mut out = Map::new();
        if usable.roots {
            out.insert("roots".into(), json!({"listChanged": false}));
        }
        if usable.sampling {
            let mut sampling = Map::new();
            if usable.sampling_tools {
                sampling.insert("tools".into(), json!({}));
            }
            if usable.sampling_context {
                sampling.insert("context".into(), json!({}));
            }
            out.insert("sampling".into(), Value::Object(sampling));
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
            sampling_tools: true,
            sampling_context: true,
            roots: true,
        };
        assert_eq!(
            all.to_legacy("2025-11-25"),
            json!({"roots": {"listChanged": false}, "sampling": {"tools": {}, "context": {}}, "elicitation": {"form": {}, "url": {}}})
        );
        assert_eq!(
            all.to_legacy("2025-06-18"),
            json!({"roots": {"listChanged": false}, "sampling": {}, "elicitation": {}})
        );
        assert_eq!(
            all.to_legacy("2024-11-05"),
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

    /// A session started for a client that declared tool use in sampling must not serve one that
    /// did not: they differ in fingerprint, and each backend hears only what its client said.
    #[test]
    fn sampling_sub_capabilities_are_read_keyed_and_passed_on_as_declared() {
        let plain = Declared::from_modern(&caps(json!({"sampling": {}})));
        let tools = Declared::from_modern(&caps(
            json!({"sampling": {"tools": {}, "future": {"x": 1}}}),
        ));
        assert!(plain.sampling && !plain.sampling_tools && !plain.sampling_context);
        assert!(tools.sampling && tools.sampling_tools && !tools.sampling_context);
        assert_ne!(plain.fingerprint(), tools.fingerprint());
        assert_eq!(
            tools.to_legacy("2025-11-25"),
            json!({"sampling": {"tools": {}}})
        );
        assert_eq!(plain.to_legacy("2025-11-25"), json!({"sampling": {}}));
        assert!(!plain.intersect(&tools).sampling_tools);
        // Not an object: not declared.
        let odd = Declared::from_modern(&caps(json!({"sampling": {"tools": true}})));
        assert!(odd.sampling && !odd.sampling_tools);
    }
}
