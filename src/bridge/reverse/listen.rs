//! The reverse bridge's subscriptions: a legacy client hears of list changes and of the
//! resources it subscribed to on its GET stream. The session holds one upstream
//! `subscriptions/listen` open for what it follows (the lists the backend says change, the
//! resources subscribed), opened again whenever that changes.

use super::{Notes, Reverse};
use crate::jsonrpc::{self, ErrorObject, Id};
use crate::protocol::meta;
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio_util::sync::CancellationToken;

/// The resource subscriptions one session may hold.
const MAX_SUBSCRIPTIONS: usize = 256;

/// What the session's upstream `subscriptions/listen` follows.
#[derive(Debug, Default)]
pub(super) struct Listening {
    pub tools: bool,
    pub prompts: bool,
    pub resources: bool,
    uris: Vec<String>,
    /// Ends the listen task in flight.
    task: Option<CancellationToken>,
}

impl Listening {
    /// The listen's params, or `None` when there is nothing to follow.
    fn params(&self) -> Option<Map<String, Value>> {
        if !(self.tools || self.prompts || self.resources || !self.uris.is_empty()) {
            return None;
        }
        // What is not followed is left out, as the filter's members are optional.
        let mut filter = Map::new();
        let types = [
            ("toolsListChanged", self.tools),
            ("promptsListChanged", self.prompts),
            ("resourcesListChanged", self.resources),
        ];
        for (name, on) in types {
            if on {
                filter.insert(name.into(), json!(true));
            }
        }
        if !self.uris.is_empty() {
            filter.insert("resourceSubscriptions".into(), json!(self.uris));
        }
        let mut p = Map::new();
        p.insert("notifications".into(), Value::Object(filter));
        Some(p)
    }
}

/// A listen's event in the legacy shape: without the subscription's id; `None` for the
/// acknowledgement, which has no legacy counterpart.
pub(super) fn legacy_event(mut note: Value) -> Option<Value> {
    if note["method"] == "notifications/subscriptions/acknowledged" {
        return None;
    }
    if let Some(meta) = note["params"]
        .get_mut("_meta")
        .and_then(Value::as_object_mut)
    {
        meta.remove(meta::SUBSCRIPTION_ID);
    }
    Some(note)
}

impl Reverse {
    pub(super) fn lock_listen(&self) -> std::sync::MutexGuard<'_, Listening> {
        self.listen.lock().expect("listen lock")
    }

    /// `resources/subscribe` (or `unsubscribe`): the upstream listen is opened again with the
    /// resources the client now follows.
    pub(super) fn subscribe(
        self: &Arc<Self>,
        params: &Map<String, Value>,
        on: bool,
    ) -> Result<Value, ErrorObject> {
        let Some(uri) = params.get("uri").and_then(Value::as_str) else {
            return Err(ErrorObject::new(
                jsonrpc::INVALID_PARAMS,
                "params.uri is required",
            ));
        };
        {
            let mut listen = self.lock_listen();
            if on {
                if listen.uris.len() >= MAX_SUBSCRIPTIONS {
                    return Err(ErrorObject::new(
                        jsonrpc::INVALID_PARAMS,
                        format!("at most {MAX_SUBSCRIPTIONS} resource subscriptions per session"),
                    ));
                }
                if !listen.uris.iter().any(|u| u == uri) {
                    listen.uris.push(uri.to_owned());
                }
            } else {
                listen.uris.retain(|u| u != uri);
            }
        }
        self.relisten();
        Ok(json!({}))
    }

    /// Holds an upstream `subscriptions/listen` open for what the session follows (ending the
    /// one before), or none if it follows nothing. Its events go to the session's stream, in
    /// the legacy shape: without the subscription's id, and without the acknowledgement.
    pub(super) fn relisten(self: &Arc<Self>) {
        let mut listen = self.lock_listen();
        if let Some(previous) = listen.task.take() {
            previous.cancel();
        }
        let Some(params) = listen.params() else {
            return;
        };
        let stop = self.stop.child_token();
        listen.task = Some(stop.clone());
        drop(listen);
        let reverse = self.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = stop.cancelled() => {}
                () = reverse.listen_upstream(params) => {}
            }
        });
    }

    async fn listen_upstream(&self, params: Map<String, Value>) {
        let Some(bridge) = self.bridge.upgrade() else {
            return;
        };
        let id = Id::String(format!(
            "listen-{}",
            self.next_ask.fetch_add(1, Ordering::Relaxed)
        ));
        let Ok(req) = self.upstream_request(&id, crate::protocol::LISTEN, params) else {
            return;
        };
        if let Err(e) = self.exchange(&bridge, &req, None, Notes::Session).await {
            tracing::debug!(code = e.code, "the upstream listen ended: {}", e.message);
        }
    }
}
