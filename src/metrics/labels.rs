//! The label values of the gateway's metrics: bounded enums, each encoded as its snake_case
//! name, and the label sets built from them (with a configured backend name, the one label
//! that is not an enum).

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};

/// Defines a label value enum whose encoding is its snake_case name.
macro_rules! label_enum {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($(#[$vdoc])* $variant),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl EncodeLabelValue for $name {
            fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
                EncodeLabelValue::encode(&self.as_str(), encoder)
            }
        }
    };
}

label_enum! {
    /// A downstream method; anything the gateway does not know is `other`.
    Method {
        ToolsCall => "tools/call",
        ToolsList => "tools/list",
        PromptsGet => "prompts/get",
        PromptsList => "prompts/list",
        ResourcesRead => "resources/read",
        ResourcesList => "resources/list",
        ResourceTemplatesList => "resources/templates/list",
        CompletionComplete => "completion/complete",
        ServerDiscover => "server/discover",
        Other => "other",
    }
}

impl Method {
    pub fn from_name(name: &str) -> Method {
        Method::ALL
            .iter()
            .copied()
            .find(|m| m.as_str() == name && *m != Method::Other)
            .unwrap_or(Method::Other)
    }
}

label_enum! {
    /// How a downstream request ended.
    Outcome {
        /// A complete result.
        Complete => "complete",
        /// An `InputRequiredResult`: the call is parked.
        InputRequired => "input_required",
        /// A JSON-RPC error from the engine or the backend.
        Error => "error",
        /// Refused at the HTTP face (4xx) before reaching the engine.
        Refused => "refused",
        /// The client went away before the outcome was sent.
        Disconnected => "disconnected",
    }
}

label_enum! {
    /// The kind of an input request put to a client.
    InputKind {
        Elicitation => "elicitation",
        Sampling => "sampling",
        Roots => "roots",
    }
}

impl From<crate::protocol::input::Kind> for InputKind {
    fn from(k: crate::protocol::input::Kind) -> InputKind {
        use crate::protocol::input::Kind;
        match k {
            Kind::Elicitation => InputKind::Elicitation,
            Kind::Sampling => InputKind::Sampling,
            Kind::Roots => InputKind::Roots,
        }
    }
}

label_enum! {
    /// What became of a retry (a request carrying `requestState` or `inputResponses`).
    RetryResult {
        /// Every input asked in the round was answered; the call went on.
        Resumed => "resumed",
        /// Some answers were missing; the client was asked again for them.
        AskedAgain => "asked_again",
        /// Sent to the replica that owns the park.
        Forwarded => "forwarded",
        /// Re-run from a sealed transcript.
        Replayed => "replayed",
        /// Sent on to a 2026-07-28 backend with the backend's own state.
        Relayed => "relayed",
        Rejected => "rejected",
    }
}

label_enum! {
    /// Why a retry was rejected; `none` for retries that were not.
    RetryReason {
        None => "none",
        /// The requestState failed verification (see `mrtr_state_failures_total`).
        InvalidState => "invalid_state",
        /// `inputResponses` was missing its state, not an object, or an answer had the wrong shape.
        InvalidResponses => "invalid_responses",
    }
}

label_enum! {
    /// Which requestState check failed. Counted only; the client always gets one frozen error.
    StateFailure {
        Malformed => "malformed",
        UnknownKey => "unknown_key",
        BadSeal => "bad_seal",
        Expired => "expired",
        Principal => "principal",
        Request => "request",
        Owner => "owner",
        UnknownPark => "unknown_park",
        StaleRound => "stale_round",
    }
}

impl From<crate::seal::Reason> for StateFailure {
    fn from(r: crate::seal::Reason) -> StateFailure {
        match r {
            crate::seal::Reason::Malformed => StateFailure::Malformed,
            crate::seal::Reason::UnknownKey => StateFailure::UnknownKey,
            crate::seal::Reason::Tampered => StateFailure::BadSeal,
        }
    }
}

label_enum! {
    /// The era a backend's probe found.
    Era {
        Legacy => "legacy",
        Modern => "modern",
    }
}

label_enum! {
    /// Why a parked call was given up.
    AbandonReason {
        /// `park_ttl` passed without a valid retry.
        Expired => "expired",
        /// The gateway is shutting down.
        Shutdown => "shutdown",
    }
}

label_enum! {
    /// What an upstream session is doing now.
    SessionState {
        /// `initialize` still running.
        Starting => "starting",
        /// Open and unused.
        Idle => "idle",
        /// Serving plain (non-interactive) requests.
        Shared => "shared",
        /// Running (or holding, while parked) an interactive call.
        Interactive => "interactive",
    }
}

label_enum! {
    /// Why an upstream session ended.
    SessionEnd {
        /// Unused for `idle_timeout`.
        Idle => "idle",
        /// Closed by the gateway because its state could no longer be trusted.
        Retired => "retired",
        /// Closed to make room for a session of another key.
        Evicted => "evicted",
        /// Ended without the gateway asking: the child exited or broke the protocol.
        Lost => "lost",
    }
}

label_enum! {
    /// One of the gateway's listeners.
    Listener {
        Mcp => "mcp",
        Internal => "internal",
        Admin => "admin",
    }
}

label_enum! {
    /// Why the gateway closed a client connection to keep its listener open to others.
    Shed {
        /// Its address had `server.max_connections_per_address` open already: closed as
        /// accepted.
        AddressCap => "address_cap",
        /// Idle the longest on the full admin listener: closed to take a new connection.
        IdleEvicted => "idle_evicted",
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct RequestLabels {
    pub method: Method,
    pub outcome: Outcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct BackendLabels {
    pub backend: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct EraLabels {
    pub backend: String,
    pub era: Era,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: InputKind,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct RetryLabels {
    pub result: RetryResult,
    pub reason: RetryReason,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct FailureLabels {
    pub reason: StateFailure,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct AbandonLabels {
    pub reason: AbandonReason,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct SessionLabels {
    pub backend: String,
    pub state: SessionState,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct SessionEndLabels {
    pub backend: String,
    pub reason: SessionEnd,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ShedLabels {
    pub listener: Listener,
    pub reason: Shed,
}
