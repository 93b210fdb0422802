//! The admin HTTP endpoint, served by shard 0: `/metrics` (Prometheus text, series per
//! shard), `/v1/health`, `/v1/placement` (partition -> shard, JSON). Requests are
//! parsed with `httparse`; only GET is served.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::{Arc, Mutex, OnceLock};

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use skein_net::Shard;

/// Each shard's rendered metrics, refreshed by the shard itself (its counters are
/// thread-local), read by the admin endpoint.
pub fn board() -> &'static Arc<Mutex<Vec<String>>> {
    static BOARD: OnceLock<Arc<Mutex<Vec<String>>>> = OnceLock::new();
    BOARD.get_or_init(|| Arc::new(Mutex::new(Vec::new())))
}

/// Stores this shard's metrics text.
pub fn publish(shard: &Shard) {
    let text = render(shard);
    let mut board = board().lock().expect("metrics board");
    if board.len() <= shard.id {
        board.resize(shard.id + 1, String::new());
    }
    board[shard.id] = text;
}

fn render(shard: &Shard) -> String {
    use std::fmt::Write;
    let id = shard.id;
    let mut out = String::new();
    let m = &shard.metrics;
    for (api, count) in m.requests.borrow().iter() {
        let _ = writeln!(out, "skein_requests_total{{shard=\"{id}\",api_key=\"{api}\"}} {count}");
    }
    for (api, count) in m.errors.borrow().iter() {
        let _ = writeln!(out, "skein_request_errors_total{{shard=\"{id}\",api_key=\"{api}\"}} {count}");
    }
    for (api, latency) in m.latency.borrow().iter() {
        let mut cumulative = 0;
        for (i, bound) in skein_net::metrics::LATENCY_BUCKETS_US.iter().enumerate() {
            cumulative += latency.buckets[i];
            let _ = writeln!(
                out,
                "skein_request_latency_us_bucket{{shard=\"{id}\",api_key=\"{api}\",le=\"{bound}\"}} {cumulative}"
            );
        }
        let _ = writeln!(
            out,
            "skein_request_latency_us_bucket{{shard=\"{id}\",api_key=\"{api}\",le=\"+Inf\"}} {}",
            latency.count
        );
        let _ = writeln!(out, "skein_request_latency_us_sum{{shard=\"{id}\",api_key=\"{api}\"}} {}", latency.sum_us);
        let _ = writeln!(out, "skein_request_latency_us_count{{shard=\"{id}\",api_key=\"{api}\"}} {}", latency.count);
    }
    let _ = writeln!(out, "skein_bytes_in_total{{shard=\"{id}\"}} {}", m.bytes_in.get());
    let _ = writeln!(out, "skein_bytes_out_total{{shard=\"{id}\"}} {}", m.bytes_out.get());
    let _ = writeln!(out, "skein_cross_shard_messages_total{{shard=\"{id}\"}} {}", m.cross_shard_messages.get());
    let _ = writeln!(out, "skein_connections{{shard=\"{id}\"}} {}", m.connections.get());
    let _ = writeln!(out, "skein_partitions{{shard=\"{id}\"}} {}", shard.hosted().len());
    let engine = shard.logs.metrics();
    let cache = shard.logs.cache().borrow();
    let _ = writeln!(out, "skein_batch_cache_hits_total{{shard=\"{id}\"}} {}", cache.hits);
    let _ = writeln!(out, "skein_batch_cache_misses_total{{shard=\"{id}\"}} {}", cache.misses);
    let _ = writeln!(out, "skein_batch_cache_bytes{{shard=\"{id}\"}} {}", cache.used_bytes());
    let _ = writeln!(out, "skein_io_writes_in_flight{{shard=\"{id}\"}} {}", engine.writes_in_flight.get());
    let _ = writeln!(out, "skein_io_writes_total{{shard=\"{id}\"}} {}", engine.writes.get());
    let _ = writeln!(out, "skein_io_syncs_total{{shard=\"{id}\"}} {}", engine.syncs.get());
    let _ = writeln!(out, "skein_appended_bytes_total{{shard=\"{id}\"}} {}", engine.appended_bytes.get());
    let _ = writeln!(out, "skein_disk_read_bytes_total{{shard=\"{id}\"}} {}", engine.disk_read_bytes.get());
    let _ = writeln!(out, "skein_corruptions_total{{shard=\"{id}\"}} {}", engine.corruptions.get());
    out
}

/// Serves admin requests until the listener fails.
///
/// # Errors
/// A message when the address cannot be bound.
pub async fn serve(shard: Rc<Shard>, address: SocketAddr) -> Result<(), String> {
    let listener = glommio::net::TcpListener::bind(address).map_err(|e| format!("cannot listen on {address}: {e}"))?;
    tracing::info!(target: "skein", %address, "admin endpoint");
    loop {
        let Ok(mut stream) = listener.accept().await else { continue };
        let shard = shard.clone();
        glommio::spawn_local(async move {
            let mut buf = vec![0u8; 8192];
            let mut len = 0;
            let path = loop {
                let Ok(n) = stream.read(&mut buf[len..]).await else { return };
                if n == 0 {
                    return;
                }
                len += n;
                let mut headers = [httparse::EMPTY_HEADER; 32];
                let mut request = httparse::Request::new(&mut headers);
                match request.parse(&buf[..len]) {
                    Ok(httparse::Status::Complete(_)) => {
                        break (request.method.unwrap_or("").to_string(), request.path.unwrap_or("").to_string())
                    }
                    Ok(httparse::Status::Partial) if len < buf.len() => continue,
                    _ => return,
                }
            };
            let (status, content_type, body) = respond(&shard, &path.0, &path.1);
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes()).await;
            let _ = stream.write_all(body.as_bytes()).await;
            let _ = stream.close().await;
        })
        .detach();
    }
}

fn respond(shard: &Shard, method: &str, path: &str) -> (&'static str, &'static str, String) {
    if method != "GET" {
        return ("405 Method Not Allowed", "text/plain", "only GET\n".into());
    }
    match path {
        "/metrics" => {
            publish(shard);
            let text = board().lock().expect("metrics board").concat();
            ("200 OK", "text/plain; version=0.0.4", text)
        }
        "/v1/health" => ("200 OK", "application/json", "{\"status\":\"ok\"}\n".into()),
        "/v1/placement" => {
            let image = shard.image();
            let placement: Vec<_> = image
                .topics
                .values()
                .flat_map(|t| {
                    t.shards
                        .iter()
                        .enumerate()
                        .map(move |(p, s)| serde_json::json!({"topic": t.name, "partition": p, "shard": s}))
                })
                .collect();
            ("200 OK", "application/json", serde_json::to_string_pretty(&placement).unwrap_or_default())
        }
        _ => ("404 Not Found", "text/plain", "not found\n".into()),
    }
}
