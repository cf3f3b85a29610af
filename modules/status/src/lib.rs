//! `status`: the server's counters, read from the host, as plain text (like nginx's
//! stub_status), JSON or the Prometheus text exposition format.
//!
//! ```json
//! {"prefix": "/status", "handler": "status", "format": "text"}
//! ```
//! `?format=text|json|prometheus` overrides the route's `format` (default `text`).

use std::fmt::Write;

use osprey_sdk::abi_stable::std_types::{RString, RVec, Tuple2};
use osprey_sdk::host::Stats;
use osprey_sdk::serde_json::{json, Map, Value};
use osprey_sdk::{
    handler_box, parse_config, ConfigError, Handler, HandlerBox, Module, Outcome, Request, Response,
};
use osprey_sdk::{ServerHealth, UpstreamState};

/// The server's allocator (mimalloc) for this module's per-request strings and lists: the C
/// library's costs several times more.
#[global_allocator]
static ALLOCATOR: osprey_sdk::alloc::HostAlloc = osprey_sdk::alloc::HostAlloc;

struct StatusModule;

impl Module for StatusModule {
    const NAME: &'static str = "status";
    const HANDLERS: &'static [&'static str] = &["status"];

    fn new(_config: &str) -> Result<Self, ConfigError> {
        Ok(StatusModule)
    }

    fn new_handler(&self, _type_name: &str, route: &str) -> Result<HandlerBox, ConfigError> {
        let conf: Conf = parse_config(route)?;
        let format = match conf.format.as_deref() {
            None => Format::Text,
            Some(name) => Format::parse(name).ok_or_else(|| {
                ConfigError::at_key(
                    route,
                    "format",
                    format!("unknown format `{name}` (text, json, prometheus)"),
                )
            })?,
        };
        Ok(handler_box(Status { format }))
    }
}

#[derive(serde::Deserialize)]
struct Conf {
    format: Option<String>,
}

#[derive(Clone, Copy)]
enum Format {
    Text,
    Json,
    Prometheus,
}

impl Format {
    fn parse(name: &str) -> Option<Format> {
        match name {
            "text" => Some(Format::Text),
            "json" => Some(Format::Json),
            "prometheus" => Some(Format::Prometheus),
            _ => None,
        }
    }
}

struct Status {
    format: Format,
}

impl Handler for Status {
    fn handle(&self, req: &Request<'_>, resp: &mut Response) -> Outcome {
        if req.method.as_str() != "GET" && !req.is_head() {
            resp.header("Allow", "GET, HEAD");
            return Outcome::Error(405);
        }
        let format = match req.query_param("format") {
            None => self.format,
            Some(name) => match Format::parse(&name) {
                Some(f) => f,
                None => {
                    resp.status(400).text(format!(
                        "unknown format `{name}` (text, json, prometheus)\n"
                    ));
                    return Outcome::Done;
                }
            },
        };
        let Some(stats) = osprey_sdk::host::stats() else {
            return Outcome::Error(503);
        };
        let ups = osprey_sdk::host::upstream_health();
        resp.set_header("Cache-Control", "no-store");
        match format {
            Format::Text => resp.text(text(&stats, &ups)),
            Format::Json => resp
                .content_type("application/json")
                .body(json(&stats, &ups)),
            Format::Prometheus => resp
                .content_type("text/plain; version=0.0.4; charset=utf-8")
                .body(prometheus(&stats, &ups)),
        };
        Outcome::Done
    }
}

/// nginx's stub_status layout, then Osprey's own lines.
fn text(s: &Stats, ups: &[ServerHealth]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Active connections: {}", s.active);
    let _ = writeln!(out, "server accepts handled requests");
    let _ = writeln!(out, " {} {} {}", s.accepted, s.accepted, s.requests);
    let _ = writeln!(
        out,
        "Reading: {} Writing: {} Waiting: {}",
        s.reading, s.writing, s.idle
    );
    let _ = writeln!(out, "Uptime: {} Reloads: {}", s.uptime_secs, s.reloads);
    for m in s.modules.iter() {
        let _ = writeln!(out, "Module {}: {}", m.0, m.1);
    }
    for c in s.counters.iter() {
        let _ = writeln!(out, "Counter {}: {}", c.0, c.1);
    }
    for u in ups {
        let _ = writeln!(
            out,
            "Upstream {} {}: {} in_flight={} responses={} fails={} response_ms={:.3}",
            u.backend,
            u.server,
            u.state.name(),
            u.in_flight,
            u.responses,
            u.fails,
            u.response_us as f64 / 1000.0
        );
    }
    out
}

fn pairs(list: &RVec<Tuple2<RString, u64>>) -> Map<String, Value> {
    list.iter()
        .map(|t| (t.0.to_string(), Value::from(t.1)))
        .collect()
}

fn json(s: &Stats, ups: &[ServerHealth]) -> String {
    let upstreams: Vec<Value> = ups
        .iter()
        .map(|u| {
            json!({
                "backend": u.backend.as_str(),
                "server": u.server.as_str(),
                "address": u.address.as_str(),
                "state": u.state.name(),
                "in_flight": u.in_flight,
                "responses": u.responses,
                "fails": u.fails,
                "response_ms": u.response_us as f64 / 1000.0,
            })
        })
        .collect();
    let value = json!({
        "uptime_secs": s.uptime_secs,
        "reloads": s.reloads,
        "connections": {
            "active": s.active,
            "reading": s.reading,
            "writing": s.writing,
            "idle": s.idle,
            "accepted": s.accepted,
        },
        "requests": s.requests,
        "modules": pairs(&s.modules),
        "counters": pairs(&s.counters),
        "upstreams": upstreams,
    });
    let mut text = value.to_string();
    text.push('\n');
    text
}

fn prometheus(s: &Stats, ups: &[ServerHealth]) -> String {
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, rows: &[(String, String)]| {
        let _ = writeln!(out, "# HELP osprey_{name} {help}");
        let _ = writeln!(out, "# TYPE osprey_{name} {kind}");
        for (labels, value) in rows {
            let _ = writeln!(out, "osprey_{name}{labels} {value}");
        }
    };
    metric(
        "uptime_seconds",
        "gauge",
        "Seconds since the server started.",
        &[(String::new(), s.uptime_secs.to_string())],
    );
    metric(
        "reloads_total",
        "counter",
        "Configuration reloads that succeeded.",
        &[(String::new(), s.reloads.to_string())],
    );
    metric(
        "connections_accepted_total",
        "counter",
        "Connections accepted.",
        &[(String::new(), s.accepted.to_string())],
    );
    let states = [
        ("reading", s.reading),
        ("writing", s.writing),
        ("idle", s.idle),
    ];
    let rows: Vec<_> = states
        .iter()
        .map(|(st, v)| (format!("{{state=\"{st}\"}}"), v.to_string()))
        .collect();
    metric("connections", "gauge", "Open connections by state.", &rows);
    metric(
        "requests_total",
        "counter",
        "Requests answered.",
        &[(String::new(), s.requests.to_string())],
    );
    let rows: Vec<_> = s
        .modules
        .iter()
        .map(|m| (format!("{{module=\"{}\"}}", label(&m.0)), m.1.to_string()))
        .collect();
    metric(
        "module_requests_total",
        "counter",
        "Requests answered per module.",
        &rows,
    );
    let rows: Vec<_> = s
        .counters
        .iter()
        .map(|c| (format!("{{name=\"{}\"}}", label(&c.0)), c.1.to_string()))
        .collect();
    metric(
        "counter_total",
        "counter",
        "Counters reported by modules.",
        &rows,
    );
    let server = |u: &ServerHealth| {
        format!(
            "backend=\"{}\",server=\"{}\"",
            label(&u.backend),
            label(&u.server)
        )
    };
    let per_server = |value: &dyn Fn(&ServerHealth) -> String| -> Vec<(String, String)> {
        ups.iter()
            .map(|u| (format!("{{{}}}", server(u)), value(u)))
            .collect()
    };
    const STATES: [UpstreamState; 4] = [
        UpstreamState::Up,
        UpstreamState::Down,
        UpstreamState::Ejected,
        UpstreamState::Checking,
    ];
    let rows: Vec<_> = ups
        .iter()
        .flat_map(|u| {
            STATES.iter().map(move |st| {
                let labels = format!("{{{},state=\"{}\"}}", server(u), st.name());
                (labels, u8::from(u.state == *st).to_string())
            })
        })
        .collect();
    metric(
        "upstream_state",
        "gauge",
        "Upstream servers' state: 1 for the one they are in.",
        &rows,
    );
    metric(
        "upstream_in_flight",
        "gauge",
        "Requests in flight to an upstream server.",
        &per_server(&|u| u.in_flight.to_string()),
    );
    metric(
        "upstream_responses_total",
        "counter",
        "Responses from an upstream server.",
        &per_server(&|u| u.responses.to_string()),
    );
    metric(
        "upstream_fails_total",
        "counter",
        "Failed attempts on an upstream server.",
        &per_server(&|u| u.fails.to_string()),
    );
    metric(
        "upstream_response_seconds",
        "gauge",
        "Time to an upstream server's response head (moving average).",
        &per_server(&|u| format!("{}", u.response_us as f64 / 1e6)),
    );
    out
}

/// A Prometheus label value: `\`, `"` and newlines escaped.
fn label(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

osprey_sdk::export_module!(StatusModule);
