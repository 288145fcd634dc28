//! Plain methods to a legacy backend: a request that is not a call (`tools/list`,
//! `completion/complete`, ...) goes on a session shared with other such requests, one exchange
//! each; `server/discover` is built from that session's `initialize` result.

use super::{Bridge, Request, backend_error, backend_failed, upstream_error};
use crate::jsonrpc::{self, ErrorObject, INVALID_PARAMS};
use crate::protocol::MODERN;
use crate::upstream;
use serde_json::{Map, Value, json};

impl Bridge {
    /// A method that is not a call, on a session shared with other such requests: one
    /// exchange, bounded by `request_timeout`.
    pub(super) async fn plain(
        &self,
        backend: usize,
        req: Request,
    ) -> Result<jsonrpc::Payload, ErrorObject> {
        if req.params.contains_key("inputResponses") || req.params.contains_key("requestState") {
            return Err(ErrorObject::new(
                INVALID_PARAMS,
                format!(
                    "`{}` cannot carry inputResponses or requestState",
                    req.method
                ),
            ));
        }
        if req.method == "server/discover" {
            let lease = self
                .lease(backend, &req, false)
                .await
                .map_err(|e| upstream_error(&e))?;
            return Ok(self.discover(lease.session().info()).into());
        }
        let (mut lease, mut call) = self.issue(backend, &req, false).await?;
        let mut resent = false;
        let sent = tokio::time::Instant::now();
        let outcome = tokio::time::timeout(self.config.limits.request_timeout, async {
            loop {
                match call.events.recv().await {
                    Some(upstream::CallEvent::Response(outcome)) => {
                        self.metrics
                            .upstream_duration(lease.session().backend(), sent.elapsed());
                        return outcome.map_err(backend_error);
                    }
                    // The backend's session was gone before it saw the request: once, on a new one.
                    Some(upstream::CallEvent::Unsent(_)) if !resent => {
                        resent = true;
                        (lease, call) = self.issue(backend, &req, false).await?;
                    }
                    Some(
                        upstream::CallEvent::Closed(reason) | upstream::CallEvent::Unsent(reason),
                    ) => {
                        return Err(backend_failed(lease.session().backend(), "", &reason));
                    }
                    Some(_) => {}
                    None => {
                        return Err(backend_failed(
                            lease.session().backend(),
                            "",
                            "its session ended",
                        ));
                    }
                }
            }
        })
        .await;
        let outcome = match outcome {
            Ok(o) => o,
            Err(_) => {
                lease.session().forget(call.id.clone());
                // A backend that did not answer in time may be stuck: later calls get a new
                // session, and this one closes once its other calls are done.
                lease.retire();
                return Err(upstream_error(&upstream::Error::Timeout(
                    lease.session().backend().to_owned(),
                )));
            }
        };
        if req.method == "tools/list" {
            self.tools.learn(backend, &req, &outcome);
        }
        self.finish(lease.session(), &req.method, false, outcome)
    }

    /// `server/discover`, built from the backend's `initialize` result.
    fn discover(&self, info: &upstream::session::InitInfo) -> Value {
        let init = &info.result;
        let mut caps = Map::new();
        if let Some(legacy) = init.get("capabilities").and_then(Value::as_object) {
            for (name, value) in legacy {
                match name.as_str() {
                    "tools" | "prompts" | "resources" | "completions" | "logging"
                    | "experimental" => {
                        let mut v = value.clone();
                        // Change notifications need subscriptions/listen, which the gateway does not offer.
                        if let Some(o) = v.as_object_mut() {
                            o.remove("listChanged");
                            o.remove("subscribe");
                        }
                        caps.insert(name.clone(), v);
                    }
                    _ => {}
                }
            }
        }
        let mut result = json!({
            "resultType": "complete",
            "supportedVersions": [MODERN],
            "capabilities": caps,
            "ttlMs": self.config.cache.ttl_ms,
            "cacheScope": self.config.cache.scope,
        });
        if let Some(meta) = info.result_meta() {
            result["_meta"] = meta;
        }
        if let Some(instructions) = init.get("instructions").filter(|i| i.is_string()) {
            result["instructions"] = instructions.clone();
        }
        result
    }
}
