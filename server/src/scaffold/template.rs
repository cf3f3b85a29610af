//! The files of a new module crate (`{name}`, `{lib}`, `{sdk}` are filled in).

pub const CARGO_TOML: &str = r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2021"

[lib]
# A shared library the server loads; rlib too, for the unit tests.
crate-type = ["cdylib", "rlib"]

[dependencies]
osprey-sdk = {sdk}
serde = { version = "1", features = ["derive"] }

[dev-dependencies]
osprey-sdk = {sdk_testing}

# Its own workspace, wherever it is put.
[workspace]

# The SDK turns a panic in a handler into a 500 by unwinding; under "abort" one bad request
# would kill the server, so export_module! refuses to build with it.
[profile.dev]
panic = "unwind"

[profile.release]
panic = "unwind"
"#;

pub const LIB_RS: &str = r##"//! `{name}`: an Osprey module. Its handler `{name}` answers `GET /{name}?name=you` with a
//! greeting from its route's configuration.

use osprey_sdk::{
    handler_box, parse_config, ConfigError, Handler, HandlerBox, Module, Outcome, Request,
    Response,
};

struct ThisModule;

impl Module for ThisModule {
    const NAME: &'static str = "{name}";
    const HANDLERS: &'static [&'static str] = &["{name}"];

    fn new(_modules_section: &str) -> Result<Self, ConfigError> {
        Ok(ThisModule)
    }

    fn new_handler(&self, _kind: &str, route: &str) -> Result<HandlerBox, ConfigError> {
        let conf: RouteConf = parse_config(route)?;
        Ok(handler_box(Greet { greeting: conf.greeting }))
    }
}

/// The route's own keys (unknown keys are refused with their line).
#[derive(serde::Deserialize)]
struct RouteConf {
    #[serde(default = "default_greeting")]
    greeting: String,
}

fn default_greeting() -> String {
    "Hello".into()
}

struct Greet {
    greeting: String,
}

impl Handler for Greet {
    fn handle(&self, req: &Request<'_>, resp: &mut Response) -> Outcome {
        let params = match req.query_params_strict() {
            Ok(params) => params,
            Err(e) => {
                resp.status(400).text(format!("bad query: {e}\n"));
                return Outcome::Done;
            }
        };
        let name = params.get("name").unwrap_or("world");
        resp.text(format!("{}, {}!\n", self.greeting, name));
        Outcome::Done
    }
}

osprey_sdk::export_module!(ThisModule);

#[cfg(test)]
mod tests {
    use super::*;
    use osprey_sdk::testing::{self, TestRequest, Verdict};

    fn handler(route: &str) -> HandlerBox {
        let module: ThisModule = testing::module("null").unwrap();
        testing::handler(&module, "{name}", route).unwrap()
    }

    #[test]
    fn greets_by_name() {
        let h = handler(r#"{"prefix": "/{name}", "greeting": "Hi"}"#);
        let resp = testing::call(&h, &TestRequest::get("/{name}?name=you"));
        assert_eq!(resp.verdict, Verdict::Done);
        assert_eq!(resp.text(), "Hi, you!\n");
    }

    #[test]
    fn refuses_a_malformed_query() {
        let resp = testing::call(&handler("{}"), &TestRequest::get("/{name}?name=%zz"));
        assert_eq!(resp.status(), 400);
    }

    #[test]
    fn unknown_route_keys_are_config_errors() {
        let module: ThisModule = testing::module("null").unwrap();
        assert!(testing::handler(&module, "{name}", r#"{"greting": "typo"}"#).is_err());
    }
}
"##;

pub const CONFIG: &str = r#"{
  "load": [{"so": "target/debug/lib{lib}.so"}],
  "listen": [{"interface": ":8080"}],
  "routing": [
    {"prefix": "/{name}", "handler": "{name}", "greeting": "Hello"}
  ]
}
"#;
