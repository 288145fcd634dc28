//! Micro-benchmarks of the per-request work the gateway does on its own CPU: sealing and opening
//! a requestState, parsing a JSON-RPC body, building an `InputRequiredResult`, and decoding a
//! backend's SSE stream.
//!
//! Run through `benches/run.sh` (which writes BENCHMARKS.md), or alone with
//! `cargo bench --bench micro`. Criterion keeps its estimates under `target/criterion/`.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use mrtr_gateway::jsonrpc;
use mrtr_gateway::protocol::input::{self, Kind};
use mrtr_gateway::seal::{self, Claims, Key, KeyRing, ParkId};
use serde_json::{Value, json};
use std::hint::black_box;

/// The claims of a typical first round: one outstanding elicitation.
fn claims() -> Claims {
    Claims {
        park: ParkId::random(),
        owner: "local".into(),
        principal: seal::digest(b"Bearer token-of-some-user"),
        request: seal::digest(b"tools/call ask_form {}"),
        round: 1,
        expires_at_ms: 1_800_000_000_000,
        outstanding: vec!["elicitation-1".into()],
        owner_addr: Some("10.0.0.7:8081".into()),
        replay: None,
    }
}

fn ring() -> KeyRing {
    KeyRing::new(vec![Key::generate("k1").expect("key").0]).expect("ring")
}

/// A modern tools/call body with `_meta`, and `arguments` of about `args_bytes` bytes.
fn tools_call_body(args_bytes: usize) -> Vec<u8> {
    let text = "x".repeat(args_bytes);
    serde_json::to_vec(&json!({
        "jsonrpc": "2.0",
        "id": 42,
        "method": "tools/call",
        "params": {
            "name": "echo",
            "arguments": {"text": text},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
                "progressToken": "p-1"
            }
        }
    }))
    .expect("serialize")
}

fn bench_seal(c: &mut Criterion) {
    let ring = ring();
    let claims = claims();
    let token = ring.seal(&claims);
    let mut g = c.benchmark_group("seal");
    g.bench_function("seal", |b| b.iter(|| ring.seal(black_box(&claims))));
    g.bench_function("open", |b| b.iter(|| ring.open(black_box(&token))));
    g.finish();
}

fn bench_parse(c: &mut Criterion) {
    let mut g = c.benchmark_group("jsonrpc_parse");
    for (name, size) in [("tools_call_small", 16), ("tools_call_10KiB", 10 * 1024)] {
        let body = tools_call_body(size);
        g.throughput(Throughput::Bytes(body.len() as u64));
        g.bench_function(name, |b| {
            b.iter(|| jsonrpc::parse(black_box(&body), 64).expect("valid"))
        });
    }
    g.finish();
}

fn bench_input_required(c: &mut Criterion) {
    let ring = ring();
    let claims = claims();
    let legacy = json!({
        "message": "What is your name?",
        "requestedSchema": {"type": "object", "properties": {"name": {"type": "string", "title": "Your name"}}, "required": ["name"]},
        "_meta": {"progressToken": 7}
    });
    let requests: Vec<(String, Value)> = vec![(
        "elicitation-1".into(),
        input::to_input_request(Kind::Elicitation, Some(&legacy)),
    )];
    let state = ring.seal(&claims);
    let mut g = c.benchmark_group("input_required");
    // The builder alone, serialized as it goes on the wire.
    g.bench_function("build", |b| {
        b.iter(|| {
            let v = input::input_required_result(
                requests.iter().map(|(k, v)| (k, v)),
                black_box(state.clone()),
            );
            serde_json::to_vec(&v).expect("serialize")
        })
    });
    // What one round costs the gateway: translate the push, seal the state, build, serialize.
    g.bench_function("translate_seal_build", |b| {
        b.iter(|| {
            let request = input::to_input_request(Kind::Elicitation, Some(black_box(&legacy)));
            let key = "elicitation-1".to_owned();
            let v = input::input_required_result([(&key, &request)], ring.seal(&claims));
            serde_json::to_vec(&v).expect("serialize")
        })
    });
    g.finish();
}

/// Decoding a backend's event stream: 64 events of a typical pushed elicitation each, split
/// into 1 KiB network chunks, then each event's data parsed as JSON-RPC.
fn bench_sse_decode(c: &mut Criterion) {
    let event = format!(
        "id: s-1\nevent: message\ndata: {}\n\n",
        json!({"jsonrpc": "2.0", "id": 3, "method": "elicitation/create", "params": {
            "message": "What is your name?",
            "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}}
        }})
    );
    let stream: Vec<u8> = event.repeat(64).into_bytes();
    let chunks: Vec<bytes::Bytes> = stream
        .chunks(1024)
        .map(bytes::Bytes::copy_from_slice)
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let mut g = c.benchmark_group("sse_decode");
    g.throughput(Throughput::Bytes(stream.len() as u64));
    g.bench_function("64_events_1KiB_chunks", |b| {
        b.iter(|| {
            rt.block_on(async {
                use futures_util::StreamExt;
                // Cloning the Vec only bumps each chunk's reference count.
                let input = futures_util::stream::iter(
                    chunks
                        .clone()
                        .into_iter()
                        .map(Ok::<_, std::convert::Infallible>),
                );
                let mut events = mrtr_gateway::sse::decode(input, 1 << 20);
                let mut n = 0;
                while let Some(ev) = events.next().await {
                    let ev = ev.expect("valid event");
                    n += jsonrpc::parse_many(ev.data.as_bytes(), 64)
                        .expect("valid")
                        .len();
                }
                assert_eq!(n, 64);
            })
        })
    });
    g.finish();
}

criterion_group!(
    benches,
    bench_seal,
    bench_parse,
    bench_input_required,
    bench_sse_decode
);
criterion_main!(benches);
