//! Through `osprey_sdk::testing`: built from route JSON as the server does, called with
//! test requests.

use osprey_sdk::testing::{self, TestRequest, Verdict};
use osprey_sdk::HandlerBox;

use super::AdFragModule;

fn handler(fragments: &str, extra: &str) -> HandlerBox {
    let dir = std::env::temp_dir().join(format!("adfrag-unit-{}", osprey_sdk::random::u64()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("fragments.json");
    std::fs::write(&file, fragments).unwrap();
    let module: AdFragModule = testing::module("null").unwrap();
    let route = format!(
        r#"{{"prefix": "/ad", "fragments": {:?}{extra}}}"#,
        file.display().to_string()
    );
    let built = testing::handler(&module, "adfrag", &route);
    let _ = std::fs::remove_dir_all(&dir);
    built.unwrap()
}

fn get(h: &HandlerBox, uri: &str) -> testing::TestResponse {
    testing::call(h, &TestRequest::get(uri).route_prefix("/ad"))
}

const TOP: &str = r#"{"top": "<a href=\"/click?site={{site}}\">{{site}}</a>"}"#;

#[test]
fn fills_the_slot_escaping_by_context() {
    let h = handler(TOP, "");
    let resp = get(&h, "/ad/top?site=a%26b%3Dc");
    assert_eq!(resp.verdict, Verdict::Done);
    assert_eq!(
        resp.text(),
        r#"<a href="/click?site=a%26b%3Dc">a&amp;b=c</a>"#
    );
    assert_eq!(
        resp.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    assert_eq!(resp.header("cache-control"), Some("private, max-age=60"));
}

#[test]
fn sets_the_uid_cookie_only_when_missing() {
    let h = handler(TOP, r#", "cookie": "vid", "cookie_max_age": 60"#);
    let resp = get(&h, "/ad/top");
    let cookie = resp.header("set-cookie").unwrap();
    let id = cookie
        .strip_prefix("vid=")
        .unwrap()
        .split(';')
        .next()
        .unwrap();
    assert_eq!(id.len(), 32);
    assert!(
        cookie.ends_with("; Max-Age=60; Path=/; HttpOnly; SameSite=Lax"),
        "{cookie}"
    );
    let again = testing::call(
        &h,
        &TestRequest::get("/ad/top")
            .route_prefix("/ad")
            .cookie("vid", id),
    );
    assert_eq!(again.header("set-cookie"), None);
    let secure = testing::call(
        &h,
        &TestRequest::get("/ad/top").route_prefix("/ad").secure(true),
    );
    assert!(secure.header("set-cookie").unwrap().contains("; Secure"));
}

#[test]
fn unknown_slots_are_404_with_the_cookie_kept() {
    let h = handler(TOP, "");
    let resp = get(&h, "/ad/nope");
    assert_eq!(resp.verdict, Verdict::Error(404));
    assert!(resp.header("set-cookie").is_some());
}

#[test]
fn serves_an_uncached_pixel() {
    let resp = get(&handler(TOP, ""), "/ad/pixel.gif");
    assert_eq!(resp.header("content-type"), Some("image/gif"));
    assert_eq!(resp.header("cache-control"), Some("no-store"));
    assert!(resp.body.starts_with(b"GIF89a\x01\x00\x01\x00"));
    assert_eq!(resp.body.last(), Some(&b';'));
}

#[test]
fn bad_queries_and_methods_are_refused() {
    let h = handler(TOP, "");
    let resp = get(&h, "/ad/top?site=%zz");
    assert_eq!(resp.status(), 400);
    assert!(
        resp.text().contains("bad percent-escape"),
        "{}",
        resp.text()
    );
    assert_eq!(get(&h, "/ad/top?site=%FF").status(), 400);
    let post = testing::call(&h, &TestRequest::post("/ad/top").route_prefix("/ad"));
    assert_eq!(post.verdict, Verdict::Error(405));
    assert_eq!(post.header("allow"), Some("GET, HEAD"));
}

#[test]
fn bad_fragment_files_are_config_errors() {
    let module: AdFragModule = testing::module("null").unwrap();
    let err = testing::handler(&module, "adfrag", r#"{"fragments": "/nonexistent.json"}"#)
        .err()
        .unwrap();
    assert!(
        err.to_string().contains("cannot read /nonexistent.json"),
        "{err}"
    );
    let dir = std::env::temp_dir().join(format!("adfrag-bad-{}", osprey_sdk::random::u64()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("f.json");
    std::fs::write(&file, r#"{"s": "<a href={{x}}>"}"#).unwrap();
    let route = format!(r#"{{"fragments": {:?}}}"#, file.display().to_string());
    let err = testing::handler(&module, "adfrag", &route).err().unwrap();
    assert!(
        err.to_string().contains("slot `s`") && err.to_string().contains("quote it"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
