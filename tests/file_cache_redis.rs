//! `file_cache` with `"store": {"redis": ...}` against a real `redis-server` on a free port:
//! two servers fill a fragment from the origin once, a purge on one is seen by the other,
//! and a dead or silent Redis costs nothing but the origin's work (never an error page).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{check_config, free_port, Response, Server};

/// A `redis-server` of our own, killed on drop.
struct Redis {
    child: Child,
    port: u16,
}

impl Redis {
    fn start() -> Redis {
        Redis::start_on(free_port())
    }

    fn start_on(port: u16) -> Redis {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server runs (apt-get install redis-server)");
        let redis = Redis { child, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        while redis.try_command(&["PING"]).is_none() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        redis
    }

    /// One command's reply line (the first line: enough for integers and statuses).
    fn try_command(&self, args: &[&str]) -> Option<String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        let mut cmd = format!("*{}\r\n", args.len());
        for a in args {
            cmd += &format!("${}\r\n{a}\r\n", a.len());
        }
        s.write_all(cmd.as_bytes()).ok()?;
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).ok()?;
        Some(line.trim_end().to_owned())
    }

    fn command(&self, args: &[&str]) -> String {
        self.try_command(args).expect("Redis answers")
    }

    fn keys(&self) -> u64 {
        self.command(&["DBSIZE"])
            .trim_start_matches(':')
            .parse()
            .unwrap()
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}

fn config(redis: &str) -> String {
    format!(
        r#"{{
  "load": [{{"so": "testkit"}}, {{"so": "file_cache"}}, {{"so": "status"}}],
  "routing": [
    {{"methods": ["PURGE"], "handler": "cache_purge", "zone": "frags", "allow": ["127.0.0.1"]}},
    {{"prefix": "/count", "handler": "count"}},
    {{"prefix": "/status", "handler": "status"}},
    {{"prefix": "/frag/", "handler": "counter", "counter": "/frag/", "text": "fragment",
      "headers": {{"Cache-Control": "max-age=60"}},
      "filters": [{{"type": "file_cache", "zone": "frags",
                    "store": {{"redis": "{redis}", "timeout": 0.2, "connect_timeout": 0.2}}}}]}},
    {{"prefix": "/lang/", "handler": "counter", "counter": "/lang/", "text": "by language",
      "headers": {{"Cache-Control": "max-age=60", "Vary": "X-Lang"}},
      "filters": [{{"type": "file_cache", "zone": "frags", "store": {{"redis": "{redis}"}}}}]}}
  ]
}}"#
    )
}

/// Origin requests this server made so far.
fn origin_hits(srv: &Server) -> u64 {
    origin_hits_of(srv, "/frag/")
}

fn origin_hits_of(srv: &Server, route: &str) -> u64 {
    let t = srv.get(&format!("/count?{route}")).text();
    t.split(' ').next().unwrap().parse().unwrap()
}

fn get_with(srv: &Server, path: &str, header: &str) -> Response {
    let req =
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{header}\r\nConnection: close\r\n\r\n");
    Response::parse(srv.raw(req.as_bytes()).as_bytes())
}

fn counter(srv: &Server, name: &str) -> u64 {
    let text = srv.get("/status").text();
    let prefix = format!("Counter file_cache_frags_{name}: ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {name} counter in\n{text}"))
        .parse()
        .unwrap()
}

fn purge(srv: &Server, path: &str) -> (u16, String) {
    let req = format!("PURGE {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    let r = Response::parse(srv.raw(req.as_bytes()).as_bytes());
    (r.status, r.text())
}

/// Until `done`, for at most two seconds.
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(2);
    while !done() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn two_servers_fill_a_fragment_from_the_origin_once() {
    let redis = Redis::start();
    let addr = format!("127.0.0.1:{}", redis.port);
    let (a, b) = (Server::start(&config(&addr)), Server::start(&config(&addr)));
    // The origin numbers its answers: "hit 1\nfragment".
    let filled = a.get("/frag/x").text();
    assert_eq!(filled, "hit 1\nfragment");
    // Written behind: the request does not wait for Redis.
    eventually("the entry reaches Redis", || redis.keys() == 1);
    let from_b = b.get("/frag/x");
    assert_eq!((from_b.status, from_b.text()), (200, filled.clone()));
    assert_eq!(
        from_b.header("cache-control"),
        Some("max-age=60"),
        "stored with its headers"
    );
    assert_eq!(b.get("/frag/x").text(), filled, "then from b's memory");
    assert_eq!(
        origin_hits(&a) + origin_hits(&b),
        1,
        "one origin hit for both"
    );
    assert_eq!(counter(&b, "remote_hits"), 1);
    assert_eq!(counter(&b, "hits"), 2);
    let ttl: i64 = redis
        .command(&["PTTL", "osprey:localhost|http|/frag/x"])
        .trim_start_matches(':')
        .parse()
        .unwrap();
    assert!(
        ttl > 86_400_000 && ttl <= 86_460_000,
        "freshness plus a day: {ttl}"
    );
}

#[test]
fn what_an_answer_varies_on_is_shared_with_the_entries() {
    let redis = Redis::start();
    let addr = format!("127.0.0.1:{}", redis.port);
    let (a, b) = (Server::start(&config(&addr)), Server::start(&config(&addr)));
    let en = get_with(&a, "/lang/x", "X-Lang: en").text();
    assert_eq!(en, "hit 1\nby language");
    // The variant's entry and the names it varies on.
    eventually("the entry reaches Redis", || redis.keys() == 2);
    // b has never seen /lang/x: it learns from Redis that it varies, then finds the variant.
    assert_eq!(get_with(&b, "/lang/x", "X-Lang: en").text(), en);
    assert_eq!(origin_hits_of(&b, "/lang/"), 0);
    // Another language is another variant: from the origin.
    assert_eq!(
        get_with(&b, "/lang/x", "X-Lang: fr").text(),
        "hit 1\nby language"
    );
    assert_eq!(origin_hits_of(&b, "/lang/"), 1);
    assert_eq!(
        get_with(&b, "/lang/x", "X-Lang: en").text(),
        en,
        "still the en variant"
    );
}

#[test]
fn a_purge_on_one_server_removes_the_fragment_for_all() {
    let redis = Redis::start();
    let addr = format!("127.0.0.1:{}", redis.port);
    let (a, b) = (Server::start(&config(&addr)), Server::start(&config(&addr)));
    a.get("/frag/p");
    a.get("/frag/keep");
    eventually("the entries reach Redis", || redis.keys() == 2);
    b.get("/frag/p");
    b.get("/frag/p");
    assert_eq!((origin_hits(&a), origin_hits(&b)), (2, 0));

    // One entry, here and in Redis: counted once.
    assert_eq!(purge(&a, "/frag/p"), (200, "purged 1\n".into()));
    assert_eq!(
        redis.command(&["EXISTS", "osprey:localhost|http|/frag/p"]),
        ":0"
    );
    assert_eq!(redis.keys(), 1, "the other fragment stays");
    // b drops its copy when the purge message comes.
    eventually("b asks the origin again", || {
        b.get("/frag/p");
        origin_hits(&b) == 1
    });
    assert_eq!(origin_hits(&a), 2, "a's purge did not refill it on a");
    assert_eq!(purge(&b, "/frag/nothing"), (404, "purged 0\n".into()));
}

#[test]
fn requests_are_answered_when_redis_dies_mid_run() {
    let mut redis = Redis::start();
    let addr = format!("127.0.0.1:{}", redis.port);
    let srv = Server::start(&config(&addr));
    assert_eq!(srv.get("/frag/before").status, 200);
    eventually("the entry reaches Redis", || redis.keys() == 1);
    redis.kill();
    for i in 0..20 {
        let started = Instant::now();
        let r = srv.get(&format!("/frag/after{i}"));
        assert!(r.status == 200 && r.text().ends_with("fragment"));
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
    }
    assert_eq!(
        srv.get("/frag/before").text(),
        "hit 1\nfragment",
        "still in memory"
    );
    assert_eq!(origin_hits(&srv), 21);
    assert!(counter(&srv, "store_errors") > 0);
    let log = srv.log_text();
    let lines = log.matches("answering from the origin").count();
    assert!(
        (1..=5).contains(&lines),
        "one line per failure streak:\n{log}"
    );
    // Purges still work here, and say the shared store was not purged.
    let (status, text) = purge(&srv, "/frag/before");
    assert_eq!(status, 503, "{text}");
    assert!(
        text.starts_with("purged 1; the shared store was not purged"),
        "{text}"
    );

    // Back (empty) on the same port: used again within a second or so, though requests kept
    // coming while it was down.
    let redis = Redis::start_on(redis.port);
    let mut n = 0;
    eventually("fills reach Redis again", || {
        n += 1;
        srv.get(&format!("/frag/back{n}"));
        redis.keys() > 0
    });
}

#[test]
fn a_silent_redis_times_out_and_the_origin_answers() {
    // Accepts connections and never answers.
    let silent = common::listener();
    let addr = silent.local_addr().unwrap().to_string();
    let srv = Server::start(&config(&addr));
    let started = Instant::now();
    let r = srv.get("/frag/slow");
    assert!(r.status == 200 && r.text().ends_with("fragment"));
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(150) && took < Duration::from_secs(2),
        "{took:?}"
    );
    // Left alone for a while after that: no more waiting.
    let started = Instant::now();
    assert_eq!(srv.get("/frag/slow2").status, 200);
    assert!(started.elapsed() < Duration::from_millis(150));
    assert!(counter(&srv, "store_errors") > 0);
    drop(silent);
}

#[test]
fn store_configuration_errors_name_the_key_and_line() {
    for (store, key, want) in [
        (r#"{"redis": "localhost"}"#, "redis", "host:port"),
        (
            r#"{"redis": "h:1", "timeout": 0}"#,
            "timeout",
            "0.001 to 60",
        ),
        (
            r#"{"redis": "h:1", "key_prefix": "a*"}"#,
            "key_prefix",
            "glob",
        ),
        (r#"{"redis": "h:1", "db": 2}"#, "db", "unknown"),
    ] {
        let conf = format!(
            "{{\n\"load\": [{{\"so\": \"testkit\"}}, {{\"so\": \"file_cache\"}}],\n\"routing\": [\n{{\"handler\": \"counter\", \"filters\": [{{\"type\": \"file_cache\",\n\"store\": {store}}}]}}]}}"
        );
        let (ok, out) = check_config(&conf, &[]);
        assert!(!ok, "{store}");
        assert!(
            out.contains(":5:") && out.contains(key) && out.contains(want),
            "{store}: {out}"
        );
    }
}
