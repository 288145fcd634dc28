//! What the gateway knows of a backend's tools, read from its `tools/list`: for each tool,
//! whether it may run again (its annotations, for the `auto` replay policy, see `replay`) and
//! which arguments it mirrors into `Mcp-Param-{Name}` headers (`x-mcp-header`, checked here on
//! every `tools/call` before the call starts).
//!
//! One cache serves both, per (backend, principal) since a backend may list different tools to
//! different callers. It is filled by one fetch of every page, on a session of the caller's,
//! or from a complete `tools/list` reply the client itself asked for (`Bridge::plain`).

use super::{Bridge, Request};
use crate::config::Limits;
use crate::jsonrpc::{ErrorObject, HEADER_MISMATCH, Raw};
use crate::protocol::param::{self, Mirror};
use crate::seal::Digest;
use crate::upstream::{CallEvent, Session};
use dashmap::DashMap;
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// How long a backend's tool list is trusted before it is fetched again.
const TTL: Duration = Duration::from_secs(300);
/// `tools/list` pages followed at most when fetching.
const MAX_PAGES: usize = 16;

/// One tool, as far as the gateway needs to know it.
#[derive(Debug, PartialEq)]
pub(super) struct Tool {
    /// Read-only or idempotent: the `auto` policy may replay it.
    pub(super) replayable: bool,
    /// The arguments its calls carry in `Mcp-Param-*` headers too.
    mirrors: Vec<Mirror>,
}

impl Tool {
    fn read(tool: &Value) -> Tool {
        Tool {
            replayable: replayable_tool(tool),
            mirrors: tool
                .get("inputSchema")
                .map(param::mirrors)
                .unwrap_or_default(),
        }
    }
}

/// True when a tool's annotations say it may run again: read-only or idempotent.
fn replayable_tool(tool: &Value) -> bool {
    let hint = |name: &str| tool.pointer(&format!("/annotations/{name}")) == Some(&json!(true));
    hint("readOnlyHint") || hint("idempotentHint")
}

/// A backend's tool list for one principal.
#[derive(Debug, Default)]
pub(super) struct Catalog {
    tools: HashMap<String, Tool>,
    /// False when some tools were not kept (`limits.max_tools_per_catalog`, or more pages than
    /// are followed): a tool not found is then not known to be absent.
    complete: bool,
}

impl Catalog {
    pub(super) fn tool(&self, name: &str) -> Option<&Tool> {
        self.tools.get(name)
    }

    /// Takes in one `tools/list` page, as many tools as `max` leaves room for.
    fn add_page(&mut self, result: &Value, max: usize) {
        let tools = result.get("tools").and_then(Value::as_array);
        for tool in tools.into_iter().flatten() {
            let Some(name) = tool.get("name").and_then(Value::as_str) else {
                continue;
            };
            if self.tools.len() >= max && !self.tools.contains_key(name) {
                self.complete = false;
                return;
            }
            self.tools.insert(name.to_owned(), Tool::read(tool));
        }
    }
}

/// Tool lists per (backend, principal), with the time each was read. The principal comes from
/// the client's credential, which anyone can vary: both the count of lists and the tools kept
/// of each are bounded (`limits.max_tool_catalogs`, `limits.max_tools_per_catalog`).
#[derive(Debug)]
pub(crate) struct Catalogs {
    cache: DashMap<(usize, Digest), (Instant, Arc<Catalog>)>,
    /// The fetches under way: the first callers of one (backend, principal) that find nothing
    /// kept share one fetch, rather than each sending `tools/list` (many parked calls started
    /// together would otherwise each fetch, and each session keep room for the list it read).
    fetching: DashMap<(usize, Digest), Arc<Fetch>>,
    max_catalogs: usize,
    max_tools: usize,
}

/// One fetch of a tool list, its outcome shared by every caller that waited for it.
type Fetch = tokio::sync::OnceCell<Result<Arc<Catalog>, String>>;

/// A caller's part in a shared fetch; the last of them to leave takes the fetch off the map,
/// whether it finished or every caller gave up on it.
struct Sharing<'a> {
    catalogs: &'a Catalogs,
    key: (usize, Digest),
    fetch: Arc<Fetch>,
}

impl Drop for Sharing<'_> {
    fn drop(&mut self) {
        // Two counts: this caller's and the map's.
        self.catalogs.fetching.remove_if(&self.key, |_, f| {
            Arc::ptr_eq(f, &self.fetch) && Arc::strong_count(f) <= 2
        });
    }
}

impl Catalogs {
    pub(crate) fn new(limits: &Limits) -> Catalogs {
        Catalogs {
            cache: DashMap::new(),
            fetching: DashMap::new(),
            max_catalogs: limits.max_tool_catalogs,
            max_tools: limits.max_tools_per_catalog,
        }
    }

    fn cached(&self, backend: usize, principal: Digest) -> Option<Arc<Catalog>> {
        let entry = self.cache.get(&(backend, principal))?;
        (entry.0.elapsed() < TTL).then(|| entry.1.clone())
    }

    fn store(&self, backend: usize, principal: Digest, catalog: Catalog) -> Arc<Catalog> {
        // Past the bound the cache starts again rather than tracking which entry is oldest.
        if self.cache.len() >= self.max_catalogs {
            self.cache.clear();
        }
        let catalog = Arc::new(catalog);
        self.cache
            .insert((backend, principal), (Instant::now(), catalog.clone()));
        catalog
    }

    /// Keeps the tools of a `tools/list` reply a client asked for, so that its next
    /// `tools/call` needs no fetch of its own.
    pub(super) fn learn(&self, backend: usize, req: &Request, outcome: &Result<Raw, ErrorObject>) {
        if let Ok(Ok(result)) = outcome.as_ref().map(Raw::to_value) {
            self.learn_list(backend, req.principal, &req.params, &result);
        }
    }

    /// Only a whole list counts (no cursor asked, none given): the tools not on one page are
    /// not known to be gone.
    fn learn_list(
        &self,
        backend: usize,
        principal: Digest,
        params: &Map<String, Value>,
        result: &Value,
    ) {
        let paged = params.get("cursor").is_some_and(|c| !c.is_null())
            || result.get("nextCursor").is_some_and(|c| !c.is_null());
        if paged {
            return;
        }
        let mut catalog = Catalog {
            complete: true,
            ..Catalog::default()
        };
        catalog.add_page(result, self.max_tools);
        self.store(backend, principal, catalog);
    }
}

/// The request's backend tool list for its principal: cached, or fetched on a session of the
/// caller's, leased as for any other non-interactive request and let go before the call takes
/// one. Callers say what a failure (the reason given) means for them.
pub(super) async fn catalog(
    bridge: &Bridge,
    backend: usize,
    req: &Request,
) -> Result<Arc<Catalog>, String> {
    if let Some(catalog) = bridge.tools.cached(backend, req.principal) {
        return Ok(catalog);
    }
    let lease = bridge
        .lease(backend, req, false)
        .await
        .map_err(|e| e.to_string())?;
    fetched(bridge, backend, req, lease.session()).await
}

/// Fetches the tool list on `session` and keeps it, or waits for the fetch another caller of
/// the same (backend, principal) has under way and takes its outcome.
async fn fetched(
    bridge: &Bridge,
    backend: usize,
    req: &Request,
    session: &Session,
) -> Result<Arc<Catalog>, String> {
    let catalogs = &bridge.tools;
    let key = (backend, req.principal);
    let shared = catalogs.fetching.entry(key).or_default().clone();
    let sharing = Sharing {
        catalogs,
        key,
        fetch: shared,
    };
    sharing
        .fetch
        .get_or_init(|| async {
            let catalog = fetch(session, req, &bridge.config.limits, catalogs.max_tools).await?;
            Ok(catalogs.store(backend, req.principal, catalog))
        })
        .await
        .clone()
}

/// Every page, as many as are followed; each `tools/list` carries the client's trace context,
/// since it is made for the client's request.
async fn fetch(
    session: &Session,
    req: &Request,
    limits: &Limits,
    max_tools: usize,
) -> Result<Catalog, String> {
    let mut catalog = Catalog {
        complete: true,
        ..Catalog::default()
    };
    let mut meta = Map::new();
    super::add_trace(&req.meta, &mut meta);
    let mut cursor = None;
    for _ in 0..MAX_PAGES {
        let mut params = Map::new();
        if let Some(cursor) = cursor.take() {
            params.insert("cursor".into(), cursor);
        }
        if !meta.is_empty() {
            params.insert("_meta".into(), Value::Object(meta.clone()));
        }
        let params = (!params.is_empty()).then_some(Value::Object(params));
        let result = fetch_page(session, params, limits.request_timeout).await?;
        catalog.add_page(&result, max_tools);
        match result.get("nextCursor") {
            Some(c) if !c.is_null() && catalog.complete => cursor = Some(c.clone()),
            _ => return Ok(catalog),
        }
    }
    // More pages than are followed.
    catalog.complete = false;
    Ok(catalog)
}

async fn fetch_page(
    session: &Session,
    params: Option<Value>,
    timeout: Duration,
) -> Result<Value, String> {
    let mut call = session
        .request("tools/list", params, false)
        .await
        .map_err(|e| e.to_string())?;
    let outcome = tokio::time::timeout(timeout, async {
        loop {
            match call.events.recv().await {
                Some(CallEvent::Response(outcome)) => {
                    return outcome
                        .map_err(|e| e.message)?
                        .to_value()
                        .map_err(|e| e.to_string());
                }
                Some(CallEvent::Closed(r) | CallEvent::Unsent(r)) => return Err(r),
                None => return Err("session ended".into()),
                Some(_) => {}
            }
        }
    })
    .await;
    outcome.unwrap_or_else(|_| {
        session.forget(call.id.clone());
        Err("tools/list timed out".into())
    })
}

/// Checks a `tools/call`'s `Mcp-Param-*` headers against its arguments, as its tool declares
/// them (2026-07-28 Streamable HTTP, "Server Behavior for Custom Headers"): -32020, which the
/// face sends with HTTP 400, when they do not match. A tool list not kept is fetched on
/// `session`, the one the call is about to go out on. A retry has none: its call may be parked
/// on a session whose backend answers nothing else until it has its answers, so a retry is
/// checked against a kept list only. A tool list that cannot be had lets the call through
/// unchecked, as the `auto` policy holds a call then: the backend is asked what it was asked
/// before the gateway looked at these headers.
pub(super) async fn check_headers(
    bridge: &Bridge,
    backend: usize,
    req: &Request,
    session: Option<&Session>,
) -> Result<(), ErrorObject> {
    if req.method != "tools/call" {
        return Ok(());
    }
    let Some(name) = req.params.get("name").and_then(Value::as_str) else {
        return Ok(());
    };
    let backend_name = &bridge.config.backends[backend].name;
    let catalog = match (bridge.tools.cached(backend, req.principal), session) {
        (Some(catalog), _) => Ok(catalog),
        (None, Some(session)) => fetched(bridge, backend, req, session).await,
        (None, None) => Err("none kept, and a retry fetches none".to_owned()),
    };
    let catalog = match catalog {
        Ok(catalog) => catalog,
        Err(why) => {
            tracing::info!(backend = %backend_name, "no tool list ({why}); Mcp-Param headers not checked");
            return Ok(());
        }
    };
    let Some(tool) = catalog.tool(name) else {
        if !catalog.complete {
            tracing::info!(backend = %backend_name, "tool not among those kept of its list; Mcp-Param headers not checked");
        }
        return Ok(());
    };
    let arguments = req.params.get("arguments");
    param::check(&tool.mirrors, &req.param_headers, arguments)
        .map_err(|why| ErrorObject::new(HEADER_MISMATCH, why))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn annotations_decide_auto() {
        assert!(replayable_tool(
            &json!({"name": "t", "annotations": {"readOnlyHint": true}})
        ));
        assert!(replayable_tool(
            &json!({"name": "t", "annotations": {"readOnlyHint": false, "idempotentHint": true}})
        ));
        assert!(!replayable_tool(
            &json!({"name": "t", "annotations": {"destructiveHint": true}})
        ));
        assert!(!replayable_tool(&json!({"name": "t"})));
        assert!(!replayable_tool(
            &json!({"name": "t", "annotations": {"readOnlyHint": "yes"}})
        ));
    }

    #[test]
    fn a_catalog_keeps_at_most_its_bound_and_knows_when_it_did_not() {
        let page = json!({"tools": [
            {"name": "a", "annotations": {"readOnlyHint": true}},
            {"name": "b", "inputSchema": {"type": "object", "properties": {
                "r": {"type": "string", "x-mcp-header": "R"},
            }}},
            {"name": "c"},
        ]});
        let mut all = Catalog {
            complete: true,
            ..Catalog::default()
        };
        all.add_page(&page, 3);
        assert!(all.complete);
        assert!(all.tool("a").unwrap().replayable);
        assert_eq!(all.tool("b").unwrap().mirrors.len(), 1);
        let mut some = Catalog {
            complete: true,
            ..Catalog::default()
        };
        some.add_page(&page, 2);
        assert!(!some.complete);
        assert!(some.tool("c").is_none());
    }

    #[test]
    fn only_a_whole_list_from_a_client_is_learnt_and_the_cache_stays_bounded() {
        let limits = crate::config::Config::parse(
            "[limits]\nmax_tool_catalogs = 2\n[[backend]]\nname = \"b\"\ncommand = \"server\"\n",
            None,
        )
        .unwrap()
        .limits;
        let catalogs = Catalogs::new(&limits);
        let principal = |n: u8| crate::seal::digest(&[n]);
        let list = json!({"tools": [{"name": "a"}]});
        let none = Map::new();
        catalogs.learn_list(
            0,
            principal(1),
            &none,
            &json!({"tools": [], "nextCursor": "2"}),
        );
        let mut cursor = Map::new();
        cursor.insert("cursor".into(), json!("2"));
        catalogs.learn_list(0, principal(1), &cursor, &list);
        assert!(catalogs.cached(0, principal(1)).is_none());
        catalogs.learn_list(0, principal(1), &none, &list);
        assert!(
            catalogs
                .cached(0, principal(1))
                .unwrap()
                .tool("a")
                .is_some()
        );
        catalogs.learn_list(0, principal(2), &none, &list);
        catalogs.learn_list(0, principal(3), &none, &list);
        assert!(catalogs.cache.len() <= 2);
        assert!(catalogs.cached(0, principal(3)).is_some());
    }
}
