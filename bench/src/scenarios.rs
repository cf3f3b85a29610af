//! What is measured: NXWEB's table (hello, static files, with and without keep-alive), the
//! pipelined and in-worker hello, TLS, HTTP/2 and the proxy, with issue 20's targets.

use crate::load::Tool;
use crate::report::Target::{self, Cpu, Rps};
use crate::servers::Kind::{self, H2o, Nginx};

#[derive(Debug, Clone, Copy)]
pub enum Transport {
    Plain,
    /// HTTP/2 in cleartext, prior knowledge.
    H2c,
    /// TLS; ALPN chooses the protocol (h2load asks for h2, wrk for HTTP/1.1).
    Tls,
}

pub struct Scenario {
    /// The chart's group: "HTTP/1.1", "h2", "files" or "proxy".
    pub family: &'static str,
    pub name: &'static str,
    pub path: &'static str,
    pub transport: Transport,
    pub tool: Tool,
    pub connections: u32,
    /// The servers Osprey is compared with here (when they run).
    pub peers: &'static [Kind],
    pub targets: &'static [Target],
    /// Part of the smoke run (one scenario of each kind).
    pub smoke: bool,
}

const BOTH: &[Kind] = &[Nginx, H2o];
const HELLO: &str = "/benchmark-inprocess";
const KA: Tool = Tool::Wrk {
    keep_alive: true,
    pipeline: 1,
};
const CLOSE: Tool = Tool::Wrk {
    keep_alive: false,
    pipeline: 1,
};
const H2_10: Tool = Tool::H2load { streams: 10 };
/// Issue 20: ahead of h2o and 3x nginx on h2c, with no more CPU per request than h2o.
const PROXY_TARGETS: &[Target] = &[Rps(Nginx, 1.2), Cpu(Nginx, 0.8), Rps(H2o, 1.0)];
const H2C_TARGETS: &[Target] = &[Rps(H2o, 1.2), Rps(Nginx, 3.0), Cpu(H2o, 1.0)];

const fn s(
    family: &'static str,
    name: &'static str,
    path: &'static str,
    transport: Transport,
    tool: Tool,
    connections: u32,
    targets: &'static [Target],
) -> Scenario {
    Scenario {
        family,
        name,
        path,
        transport,
        tool,
        connections,
        peers: BOTH,
        targets,
        smoke: false,
    }
}

use Transport::{H2c, Plain, Tls};

pub const SCENARIOS: &[Scenario] = &[
    Scenario {
        smoke: true,
        ..s(
            "HTTP/1.1",
            "hello ka c100",
            HELLO,
            Plain,
            KA,
            100,
            &[Rps(Nginx, 1.1)],
        )
    },
    s(
        "HTTP/1.1",
        "hello ka c1000",
        HELLO,
        Plain,
        KA,
        1000,
        &[Rps(Nginx, 1.1)],
    ),
    s(
        "HTTP/1.1",
        "hello close c100",
        HELLO,
        Plain,
        CLOSE,
        100,
        &[Rps(Nginx, 1.1)],
    ),
    s(
        "HTTP/1.1",
        "hello close c1000",
        HELLO,
        Plain,
        CLOSE,
        1000,
        &[Rps(Nginx, 1.1)],
    ),
    Scenario {
        smoke: true,
        ..s(
            "HTTP/1.1",
            "pipelined x16 c100",
            HELLO,
            Plain,
            Tool::Wrk {
                keep_alive: true,
                pipeline: 16,
            },
            100,
            &[Rps(Nginx, 6.0)],
        )
    },
    // nginx's `return 200` against a handler that runs on the worker pool: the cost of the
    // hand-off, which h2o has no equivalent of.
    Scenario {
        smoke: true,
        peers: &[Nginx],
        ..s(
            "HTTP/1.1",
            "inworker ka c100",
            "/benchmark-inworker",
            Plain,
            KA,
            100,
            &[Cpu(Nginx, 1.0)],
        )
    },
    Scenario {
        smoke: true,
        ..s("HTTP/1.1", "TLS hello ka c100", HELLO, Tls, KA, 100, &[])
    },
    Scenario {
        smoke: true,
        ..s(
            "h2",
            "h2c hello c10 m10",
            HELLO,
            H2c,
            H2_10,
            10,
            H2C_TARGETS,
        )
    },
    s(
        "h2",
        "h2c hello c100 m10",
        HELLO,
        H2c,
        H2_10,
        100,
        H2C_TARGETS,
    ),
    s(
        "h2",
        "h2c 2.3k c10 m10",
        "/f2k.html",
        H2c,
        H2_10,
        10,
        H2C_TARGETS,
    ),
    s(
        "h2",
        "TLS hello c10 m10",
        HELLO,
        Tls,
        H2_10,
        10,
        &[Rps(H2o, 1.0)],
    ),
    Scenario {
        smoke: true,
        ..s(
            "h2",
            "TLS 2.3k c10 m10",
            "/f2k.html",
            Tls,
            H2_10,
            10,
            &[Rps(H2o, 1.0)],
        )
    },
    s(
        "files",
        "2.3k ka c400",
        "/f2k.html",
        Plain,
        KA,
        400,
        &[Rps(Nginx, 1.3)],
    ),
    s(
        "files",
        "2.3k close c400",
        "/f2k.html",
        Plain,
        CLOSE,
        400,
        &[],
    ),
    s(
        "files",
        "100k ka c400",
        "/f100k.bin",
        Plain,
        KA,
        400,
        &[Rps(Nginx, 1.1)],
    ),
    s(
        "files",
        "2.1m ka c400",
        "/f2m.bin",
        Plain,
        KA,
        400,
        &[Rps(Nginx, 1.0), Cpu(Nginx, 1.0)],
    ),
    Scenario {
        smoke: true,
        ..s(
            "files",
            "2.1m close c400",
            "/f2m.bin",
            Plain,
            CLOSE,
            400,
            &[Rps(Nginx, 1.0), Cpu(Nginx, 1.0)],
        )
    },
    // The same upstream (nginx on the load generator's CPU) behind each server's proxy, with
    // kept-alive upstream connections; issue 21's two loads.
    Scenario {
        smoke: true,
        ..s(
            "proxy",
            "hello ka c50",
            "/proxy/hello",
            Plain,
            KA,
            50,
            PROXY_TARGETS,
        )
    },
    s(
        "proxy",
        "hello ka c200",
        "/proxy/hello",
        Plain,
        KA,
        200,
        PROXY_TARGETS,
    ),
];
