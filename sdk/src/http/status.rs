//! Reason phrases and error pages, shared by the core and modules so every error looks alike.

use crate::params::html_escape;
use crate::Response;

/// The reason phrase of a status code (RFC 9110 §15), or of its class when unknown.
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
        422 => "Unprocessable Content",
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

/// A small HTML error page: the status, and a reason when there is one (escaped).
pub fn error_page(status: u16, detail: &str) -> Vec<u8> {
    let title = format!("{status} {}", reason(status));
    let detail = if detail.is_empty() {
        String::new()
    } else {
        format!("<p>{}</p>\n", html_escape(detail))
    };
    format!(
        "<!DOCTYPE html>\n<html><head><title>{title}</title></head>\n<body><h1>{title}</h1>\n{detail}<hr><address>osprey</address></body></html>\n"
    )
    .into_bytes()
}

/// Answer `status` with the error page and `detail` as the reason.
pub fn respond_error(resp: &mut Response, status: u16, detail: &str) {
    resp.status(status).html(error_page(status, detail));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_name_the_status_and_escape_the_reason() {
        let page = String::from_utf8(error_page(412, "<If-Match>")).unwrap();
        assert!(page.contains("<title>412 Precondition Failed</title>"));
        assert!(page.contains("<p>&lt;If-Match&gt;</p>"));
        assert!(!String::from_utf8(error_page(404, ""))
            .unwrap()
            .contains("<p>"));
        assert_eq!(reason(299), "Success");
    }
}
