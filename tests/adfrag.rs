//! The worked SDK example, `examples/adfrag`, served by the real server.

mod common;

use common::{check_config, Server, TempDir};

#[test]
fn serves_fragments_cookie_pixel_and_errors() {
    let dir = TempDir::new("adfrag");
    let fragments = dir.write(
        "fragments.json",
        r#"{"top": "<a href=\"/click?site={{site}}\">{{site}}</a>"}"#,
    );
    let srv = Server::start(&format!(
        r#"{{"load": [{{"so": "adfrag"}}], "routing": [
            {{"prefix": "/ad", "handler": "adfrag", "fragments": "{}"}}]}}"#,
        fragments.display()
    ));
    let r = srv.get("/ad/top?site=a%26b%3Dc%3Cx");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.text(),
        r#"<a href="/click?site=a%26b%3Dc%3Cx">a&amp;b=c&lt;x</a>"#
    );
    assert_eq!(r.header("cache-control"), Some("private, max-age=60"));
    let cookie = r.header("set-cookie").expect("a uid cookie");
    let uid = cookie
        .strip_prefix("uid=")
        .unwrap()
        .split(';')
        .next()
        .unwrap();
    assert_eq!(uid.len(), 32, "{cookie}");

    // A visitor with the cookie keeps it.
    let raw = srv.raw(
        format!(
            "GET /ad/top HTTP/1.1\r\nHost: a\r\nCookie: uid={uid}\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
    );
    let r = common::Response::parse(raw.as_bytes());
    assert_eq!((r.status, r.header("set-cookie")), (200, None), "{raw}");

    let r = srv.get("/ad/pixel.gif");
    assert_eq!(r.header("content-type"), Some("image/gif"));
    assert_eq!(r.header("cache-control"), Some("no-store"));
    assert!(r.body.starts_with(b"GIF89a"));

    // Unknown slot: the core's 404 page, with the cookie the handler set.
    let r = srv.get("/ad/nope");
    assert_eq!(r.status, 404);
    assert!(r.header("set-cookie").is_some(), "{r:?}");
    assert_eq!(srv.get("/ad/top?site=%zz").status, 400);
}

#[test]
fn its_sample_configuration_is_accepted() {
    // Relative paths in it are from the repository root, as `osprey -c` runs there.
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let text = std::fs::read_to_string(format!("{root}/examples/adfrag/conf/adfrag.json")).unwrap();
    let text = text.replace("examples/adfrag", &format!("{root}/examples/adfrag"));
    let (ok, out) = check_config(&text, &[]);
    assert!(ok, "{out}");
}
