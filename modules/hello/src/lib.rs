//! `hello`: echoes what the server saw of the request, as NXWEB's hello module does.
//! The smallest complete example of the SDK.

use osprey_sdk::params::html_escape;
use osprey_sdk::{
    handler_box, ConfigError, Handler, HandlerBox, Module, Outcome, Request, Response,
};
use std::fmt::Write;

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
