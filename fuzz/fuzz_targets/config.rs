//! The configuration parser (JSON with comments and trailing commas): any text gives a
//! configuration or an error naming a line, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use osprey::config::Config;

fuzz_target!(|input: &[u8]| {
    let Ok(text) = std::str::from_utf8(input) else {
        return;
    };
    // Checking `listen` resolves host names: a fuzzer must not send DNS queries. A file with a
    // top-level `listen` is valid JSON by the time it is checked, so it is skipped here.
    let json = osprey::config::jsonc::to_json(text);
    if let Ok(serde_json::Value::Object(map)) = serde_json::from_str::<serde_json::Value>(&json) {
        if map.contains_key("listen") {
            return;
        }
    }
    if let Err(e) = Config::parse("fuzz.json", text) {
        let message = e.to_string();
        assert!(message.starts_with("fuzz.json"), "{message}");
    }
});
