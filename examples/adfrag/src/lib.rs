//! `adfrag`: a worked example of the SDK. It serves ad fragments by slot (`/ad/<slot>`) from a
//! JSON file of templates whose `{{placeholders}}` are filled from the query string and escaped
//! by context; it sets a `uid` cookie when the client has none, and serves a 1×1 GIF tracking
//! pixel at `/ad/pixel.gif`.
//!
//! ```json
//! {"prefix": "/ad", "handler": "adfrag", "fragments": "conf/adfrag.json",
//!  "cookie": "uid", "cookie_max_age": 31536000, "cache_control": "private, max-age=60"}
//! ```

mod template;

use std::collections::HashMap;

use osprey_sdk::abi_stable::std_types::{RArc, RVec};
use osprey_sdk::cookie::{SameSite, SetCookie};
use osprey_sdk::random::RequestId;
use osprey_sdk::{
    handler_box, parse_config, ConfigError, Handler, HandlerBox, HeaderText, Module, Outcome,
    Request, Response,
};
use serde::Deserialize;

use template::Template;

/// The smallest transparent GIF: 1×1, one palette entry.
const PIXEL: &[u8] = b"GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\xff\xff\xff\x21\xf9\x04\x01\x00\x00\x00\x00\x2c\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02\x44\x01\x00\x3b";

#[derive(Deserialize)]
struct Conf {
    /// A JSON object: slot name → template.
    fragments: String,
    /// The visitor-id cookie's name.
    #[serde(default = "default_cookie")]
    cookie: String,
    #[serde(default = "default_max_age")]
    cookie_max_age: i64,
    /// `Cache-Control` of fragments (the pixel is never cached).
    #[serde(default = "default_cache_control")]
    cache_control: String,
}

fn default_cookie() -> String {
    "uid".into()
}

fn default_max_age() -> i64 {
    365 * 24 * 3600
}

fn default_cache_control() -> String {
    // `private`: responses may carry a per-visitor cookie.
    "private, max-age=60".into()
}

struct AdFragModule;

impl Module for AdFragModule {
    const NAME: &'static str = "adfrag";
    const HANDLERS: &'static [&'static str] = &["adfrag"];

    fn new(_config: &str) -> Result<Self, ConfigError> {
        Ok(AdFragModule)
    }

    fn new_handler(&self, _kind: &str, route: &str) -> Result<HandlerBox, ConfigError> {
        let conf: Conf = parse_config(route)?;
        let at = |message: String| ConfigError::at_key(route, "fragments", message);
        let text = std::fs::read_to_string(&conf.fragments)
            .map_err(|e| at(format!("cannot read {}: {e}", conf.fragments)))?;
        let sources: HashMap<String, String> =
            osprey_sdk::serde_json::from_str(&text).map_err(|e| {
                at(format!(
                    "{}: not an object of slot → template: {e}",
                    conf.fragments
                ))
            })?;
        let mut slots = HashMap::with_capacity(sources.len());
        for (slot, source) in sources {
            let template = Template::compile(&source)
                .map_err(|e| at(format!("{}: slot `{slot}`: {e}", conf.fragments)))?;
            slots.insert(slot, template);
        }
        if SetCookie::new(&conf.cookie, "x").build().is_err() {
            return Err(ConfigError::at_key(
                route,
                "cookie",
                "not a valid cookie name",
            ));
        }
        Ok(handler_box(AdFrag {
            slots,
            cookie: conf.cookie,
            cookie_max_age: conf.cookie_max_age,
            cache_control: conf.cache_control.into(),
            pixel: RArc::new(RVec::from(PIXEL)),
        }))
    }
}

struct AdFrag {
    slots: HashMap<String, Template>,
    cookie: String,
    cookie_max_age: i64,
    /// Owned once, cloned per response (a `String` header value: no leak on reload).
    cache_control: HeaderText,
    pixel: RArc<RVec<u8>>,
}

impl AdFrag {
    /// Give a visitor without our cookie a fresh id.
    fn set_uid(&self, req: &Request<'_>, resp: &mut Response) {
        if req.cookie(&self.cookie).is_some() {
            return;
        }
        let id = RequestId::new();
        let mut cookie = SetCookie::new(&self.cookie, id.as_str())
            .max_age(self.cookie_max_age)
            .path("/")
            .http_only()
            .same_site(SameSite::Lax);
        if req.secure {
            cookie = cookie.secure();
        }
        // The name was checked at start and the value is hex: this cannot fail.
        let _ = resp.set_cookie(&cookie);
    }
}

impl Handler for AdFrag {
    fn handle(&self, req: &Request<'_>, resp: &mut Response) -> Outcome {
        if !matches!(req.method.as_str(), "GET" | "HEAD") {
            resp.header("Allow", "GET, HEAD");
            return Outcome::Error(405);
        }
        self.set_uid(req, resp);
        let slot = req.path_info.trim_start_matches('/');
        if slot == "pixel.gif" {
            resp.content_type("image/gif")
                .header("Cache-Control", "no-store")
                .body_shared(self.pixel.clone());
            return Outcome::Done;
        }
        let Some(template) = self.slots.get(slot) else {
            return Outcome::Error(404);
        };
        let params = match req.query_params_strict() {
            Ok(params) => params,
            Err(e) => {
                resp.status(400).text(format!("bad query: {e}\n"));
                return Outcome::Done;
            }
        };
        resp.html(template.render(&params))
            .header("Cache-Control", self.cache_control.clone());
        Outcome::Done
    }
}

osprey_sdk::export_module!(AdFragModule);

#[cfg(test)]
mod tests;
