//! A minimal WebDriver client for chromedriver (headless Debian chromium):
//! start it, open a session, load a page, run a script, read the browser log.
//! HTTP/1.1 over a plain TcpStream to localhost: no HTTP crate is in
//! Cargo.lock and chromedriver only ever answers JSON with a Content-Length.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use libtest_mimic::Failed;
use serde_json::{json, Value};

pub const CHROMIUM: &str = "/usr/bin/chromium";
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// A running chromedriver with one headless session; both end on drop.
pub struct Browser {
    driver: Child,
    port: u16,
    session: String,
}

impl Browser {
    /// Starts chromedriver and a headless chromium with its own profile in `profile`.
    pub fn start(profile: &Path) -> Result<Browser, Failed> {
        for bin in [CHROMIUM, CHROMEDRIVER] {
            if !Path::new(bin).exists() {
                return Err(format!("{bin} is missing: install chromium: bash tests/install-test-deps.sh").into());
            }
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let mut browser = Browser {
            driver,
            port,
            session: String::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while browser
            .call("GET", "/status", None)
            .map_or(true, |s| s["value"]["ready"] != true)
        {
            if Instant::now() > deadline {
                return Err("chromedriver did not become ready in 20 s".into());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=1400,1000",
            &format!("--user-data-dir={}", profile.display()),
        ];
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": args},
            "goog:loggingPrefs": {"browser": "ALL"},
        }}});
        let reply = browser.call("POST", "/session", Some(&caps))?;
        browser.session = reply["value"]["sessionId"]
            .as_str()
            .ok_or_else(|| format!("no session: {reply}"))?
            .to_string();
        Ok(browser)
    }

    /// Loads `url` and waits for its load event (WebDriver's default page-load strategy).
    pub fn open(&self, url: &str) -> Result<(), Failed> {
        self.session_call("POST", "url", Some(&json!({ "url": url })))
            .map(|_| ())
    }

    /// Runs `script` (a function body) in the page and returns what it returns.
    pub fn execute(&self, script: &str) -> Result<Value, Failed> {
        let v = self.session_call("POST", "execute/sync", Some(&json!({"script": script, "args": []})))?;
        Ok(v["value"].clone())
    }

    /// The browser's console log since the last call (chromedriver's `se/log`).
    pub fn console_log(&self) -> Result<Vec<Value>, Failed> {
        let v = self.session_call("POST", "se/log", Some(&json!({"type": "browser"})))?;
        Ok(v["value"].as_array().cloned().unwrap_or_default())
    }

    fn session_call(&self, method: &str, what: &str, body: Option<&Value>) -> Result<Value, Failed> {
        let v = self.call(method, &format!("/session/{}/{what}", self.session), body)?;
        if v["value"]["error"].is_string() {
            return Err(format!("webdriver {what}: {}", v["value"]).into());
        }
        Ok(v)
    }

    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value, Failed> {
        let body = body.map(Value::to_string).unwrap_or_default();
        let mut stream = TcpStream::connect(("127.0.0.1", self.port))?;
        stream.set_read_timeout(Some(Duration::from_secs(120)))?;
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.port,
            body.len()
        )?;
        // The reply's head, then exactly Content-Length bytes: chromedriver may
        // keep the connection open whatever the request asked.
        let mut reply = Vec::new();
        let mut byte = [0u8; 1];
        while !reply.ends_with(b"\r\n\r\n") {
            if stream.read(&mut byte)? == 0 {
                return Err(format!("{method} {path}: connection closed in the reply's head").into());
            }
            reply.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&reply).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| format!("{method} {path}: no Content-Length in {head:?}"))?;
        let mut body = vec![0u8; length];
        stream.read_exact(&mut body)?;
        serde_json::from_slice(&body)
            .map_err(|e| format!("{method} {path}: {e}: {}", String::from_utf8_lossy(&body)).into())
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = self.call("DELETE", &format!("/session/{}", self.session), None);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
