//! `hello`: echoes what the server saw of the request, as NXWEB's hello module does.
//! The smallest complete example of the SDK.

use osprey_sdk::params::html_escape;
use osprey_sdk::{
    handler_box, ConfigError, Handler, HandlerBox, Module, Outcome, Request, Response,
};
use std::fmt::Write;

/// The server's allocator (mimalloc) for this module's per-request strings and lists: the C
/// library's costs several times more.
#[global_allocator]
static ALLOCATOR: osprey_sdk::alloc::HostAlloc = osprey_sdk::alloc::HostAlloc;

struct HelloModule;

impl Module for HelloModule {
    const NAME: &'static str = "hello";
    const HANDLERS: &'static [&'static str] = &["hello"];

    fn new(_config: &str) -> Result<Self, ConfigError> {
        Ok(HelloModule)
    }

    fn new_handler(&self, _type_name: &str, route: &str) -> Result<HandlerBox, ConfigError> {
        let _: osprey_sdk::serde_json::Value = osprey_sdk::parse_config(route)?;
        Ok(handler_box(Hello))
    }
}

struct Hello;

impl Handler for Hello {
    fn handle(&self, req: &Request<'_>, resp: &mut Response) -> Outcome {
        let mut html = String::from("<html><head><title>Hello</title></head><body>\n");
        html.push_str("<p>Hello, world!</p>\n<table>\n");
        let rows = [
            ("method", req.method.as_str()),
            ("uri", req.uri.as_str()),
            ("path_info", req.path_info.as_str()),
            ("http", if req.http_minor == 0 { "1.0" } else { "1.1" }),
            ("host", req.host.as_str()),
            ("remote_addr", req.remote_addr.as_str()),
            ("secure", if req.secure { "yes" } else { "no" }),
        ];
        for (name, value) in rows {
            let _ = writeln!(
                html,
                "<tr><th>{name}</th><td>{}</td></tr>",
                html_escape(value)
            );
        }
        for h in req.headers.iter() {
            let value = String::from_utf8_lossy(h.value.as_slice());
            let _ = writeln!(
                html,
                "<tr><th>{}</th><td>{}</td></tr>",
                html_escape(&h.name),
                html_escape(&value)
            );
        }
        for (name, value) in req.query_params().iter() {
            let _ = writeln!(
                html,
                "<tr><th>?{}</th><td>{}</td></tr>",
                html_escape(name),
                html_escape(value)
            );
        }
        let _ = writeln!(
            html,
            "<tr><th>body bytes</th><td>{}</td></tr>",
            req.body.len()
        );
        html.push_str("</table></body></html>\n");
        resp.html(html);
        Outcome::Done
    }
}

osprey_sdk::export_module!(HelloModule);

#[cfg(test)]
mod tests {
    use super::*;
    use osprey_sdk::testing::{self, TestRequest, Verdict};

    #[test]
    fn echoes_the_request_escaped() {
        let module: HelloModule = testing::module("null").unwrap();
        let hello = testing::handler(&module, "hello", r#"{"prefix": "/hello"}"#).unwrap();
        let req = TestRequest::parse(
            b"GET /hello/x?q=%3Cb%3E HTTP/1.0\r\nHost: Example.org\r\nX-Evil: <script>\r\n\r\n",
        )
        .unwrap()
        .route_prefix("/hello");
        let resp = testing::call(&hello, &req);
        assert_eq!((resp.verdict, resp.status()), (Verdict::Done, 200));
        assert_eq!(
            resp.header("content-type"),
            Some("text/html; charset=utf-8")
        );
        let html = resp.text();
        for row in [
            "<tr><th>path_info</th><td>/x</td></tr>",
            "<tr><th>http</th><td>1.0</td></tr>",
            "<tr><th>host</th><td>example.org</td></tr>",
            "<tr><th>X-Evil</th><td>&lt;script&gt;</td></tr>",
            "<tr><th>?q</th><td>&lt;b&gt;</td></tr>",
        ] {
            assert!(html.contains(row), "{row} in {html}");
        }
    }
}
