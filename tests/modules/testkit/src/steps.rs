//! `steps` (filter): declares the steps of its `wants` list (every step without one, as a
//! module built before `Filter::wants` existed) and counts each step the core calls, by the
//! filter's `name`; `steps-report` (handler) answers those counts. Its `after` adds
//! `X-Steps-<name>` and the cache key it was given as `X-Key-<name>`.

use std::collections::BTreeMap;
use std::sync::Mutex;

use osprey_sdk::abi_stable::std_types::RVec;
use osprey_sdk::{
    ConfigError, Filter, Handler, HeaderPair, Mode, Outcome, Request, Response, Step, Wants,
};

const STEPS: [(&str, Wants); 8] = [
    ("key", Wants::KEY),
    ("cache_key", Wants::CACHE_KEY),
    ("before_mode", Wants::BEFORE_MODE),
    ("before", Wants::BEFORE),
    ("request_headers", Wants::REQUEST_HEADERS),
    ("cancel", Wants::CANCEL),
    ("after_mode", Wants::AFTER_MODE),
    ("after", Wants::AFTER),
];

/// Calls per filter name, per step (in `STEPS` order).
static CALLS: Mutex<BTreeMap<String, [u64; 8]>> = Mutex::new(BTreeMap::new());

#[derive(serde::Deserialize)]
struct Conf {
    name: String,
    wants: Option<Vec<String>>,
}

pub struct Steps {
    name: String,
    wants: Option<Wants>,
}

impl Steps {
    pub fn new(json: &str) -> Result<Steps, ConfigError> {
        let conf: Conf = osprey_sdk::parse_config(json)?;
        let wants = match conf.wants {
            None => None,
            Some(list) => Some(list.iter().try_fold(Wants::NONE, |w, name| {
                // `before` for OPTIONS only: its calls are counted as `before`.
                if name == "before_options" {
                    return Ok(w | Wants::BEFORE_OPTIONS);
                }
                match STEPS.iter().find(|(n, _)| n == name) {
                    Some(&(_, step)) => Ok(w | step),
                    None => Err(ConfigError::at_key(
                        json,
                        "wants",
                        format!("no step {name}"),
                    )),
                }
            })?),
        };
        Ok(Steps {
            name: conf.name,
            wants,
        })
    }

    fn called(&self, step: &str) {
        let i = STEPS.iter().position(|(n, _)| *n == step).expect("a step");
        let mut calls = CALLS.lock().unwrap();
        calls.entry(self.name.clone()).or_default()[i] += 1;
    }
}

impl Filter for Steps {
    fn wants(&self) -> Wants {
        self.wants.unwrap_or(Wants::ALL)
    }

    fn cache_key(&self, _req: &Request<'_>, key: &mut String) {
        self.called("cache_key");
        key.push_str("|steps");
    }

    fn before_mode(&self, _req: &Request<'_>, _key: &str) -> Mode {
        self.called("before_mode");
        Mode::Inline
    }

    fn before(&self, _req: &Request<'_>, _key: &str, _resp: &mut Response) -> Step {
        self.called("before");
        Step::Continue
    }

    fn request_headers(&self, _req: &Request<'_>, _key: &str, _set: &mut RVec<HeaderPair>) {
        self.called("request_headers");
    }

    fn cancel(&self, _key: &str) {
        self.called("cancel");
    }

    fn after_mode(&self, _req: &Request<'_>, _resp: &Response) -> Mode {
        self.called("after_mode");
        Mode::Inline
    }

    fn after(&self, _req: &Request<'_>, key: &str, resp: &mut Response) {
        self.called("after");
        resp.header(format!("X-Steps-{}", self.name), "done");
        resp.header(format!("X-Key-{}", self.name), key.to_owned());
    }
}

/// `steps-report`: `<name> cache_key=N before_mode=N ...` per filter name, one a line.
pub struct Report;

impl Handler for Report {
    fn handle(&self, _req: &Request<'_>, resp: &mut Response) -> Outcome {
        let calls = CALLS.lock().unwrap();
        let mut out = String::new();
        for (name, counts) in calls.iter() {
            out.push_str(name);
            for ((step, _), n) in STEPS.iter().zip(counts).skip(1) {
                out.push_str(&format!(" {step}={n}"));
            }
            out.push('\n');
        }
        resp.text(out);
        Outcome::Done
    }
}
