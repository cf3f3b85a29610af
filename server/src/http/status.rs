//! Reason phrases and the core's error pages.

pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        206 => "Partial Content",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        416 => "Range Not Satisfiable",
        417 => "Expectation Failed",
        421 => "Misdirected Request",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => match status / 100 {
            1 => "Informational",
            2 => "Success",
            3 => "Redirection",
            4 => "Client Error",
            _ => "Server Error",
        },
    }
}

/// Statuses that never carry a body.
pub fn bodiless(status: u16) -> bool {
    status < 200 || status == 204 || status == 304
}

/// A small HTML error page: the status, and a reason when there is one.
pub fn error_page(status: u16, detail: &str) -> Vec<u8> {
    let title = format!("{status} {}", reason(status));
    let detail = if detail.is_empty() {
        String::new()
    } else {
        format!("<p>{}</p>\n", osprey_sdk::params::html_escape(detail))
    };
    format!(
        "<!DOCTYPE html>\n<html><head><title>{title}</title></head>\n<body><h1>{title}</h1>\n{detail}<hr><address>osprey</address></body></html>\n"
    )
    .into_bytes()
}
