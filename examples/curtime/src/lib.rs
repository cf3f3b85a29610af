//! `curtime`: the current time as a small HTML fragment, NXWEB's sample for composed pages.
//! `?max_age=N` makes the answer cacheable for N seconds (`Cache-Control: max-age=N`), so a
//! page that includes `/curtime?max_age=5` and `/curtime?max_age=20` behind `file_cache` shows
//! two clocks that move at their own pace.
//!
//! ```json
//! {"prefix": "/curtime", "handler": "curtime"}
//! ```

use std::time::SystemTime;

use osprey_sdk::{
    handler_box, ConfigError, Handler, HandlerBox, Module, Outcome, Request, Response,
};

struct CurTimeModule;

impl Module for CurTimeModule {
    const NAME: &'static str = "curtime";
    const HANDLERS: &'static [&'static str] = &["curtime"];

    fn new(_config: &str) -> Result<Self, ConfigError> {
        Ok(CurTimeModule)
    }

    fn new_handler(&self, _kind: &str, route: &str) -> Result<HandlerBox, ConfigError> {
        osprey_sdk::parse_config::<Empty>(route)?;
        Ok(handler_box(CurTime))
    }
}

osprey_sdk::export_module!(CurTimeModule);

/// The route takes no keys of its own.
#[derive(osprey_sdk::serde::Deserialize)]
#[serde(crate = "osprey_sdk::serde")]
struct Empty {}

pub struct CurTime;

impl Handler for CurTime {
    fn handle(&self, req: &Request<'_>, resp: &mut Response) -> Outcome {
        let max_age = match req.query_param("max_age").map(|v| v.parse::<u32>()) {
            None => 0,
            Some(Ok(n)) => n,
            Some(Err(_)) => {
                resp.status(400)
                    .text("max_age must be a number of seconds\n");
                return Outcome::Done;
            }
        };
        let now = SystemTime::now();
        let cache = if max_age == 0 {
            "no-cache".to_owned()
        } else {
            format!("max-age={max_age}")
        };
        resp.set_header("Cache-Control", cache)
            .set_header("Last-Modified", httpdate::fmt_http_date(now))
            .html(format!(
                "<span class=\"curtime\" data-max-age=\"{max_age}\">{}</span>",
                httpdate::fmt_http_date(now)
            ));
        Outcome::Done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use osprey_sdk::testing::{self, TestRequest};

    #[test]
    fn answers_the_time_cacheable_for_max_age() {
        let r = testing::call(&CurTime, &TestRequest::get("/curtime?max_age=5"));
        assert_eq!(r.status(), 200);
        assert_eq!(r.header("cache-control"), Some("max-age=5"));
        assert!(r.text().contains("data-max-age=\"5\""), "{}", r.text());
        let r = testing::call(&CurTime, &TestRequest::get("/curtime"));
        assert_eq!(r.header("cache-control"), Some("no-cache"));
        assert_eq!(
            testing::call(&CurTime, &TestRequest::get("/curtime?max_age=x")).status(),
            400
        );
    }
}
