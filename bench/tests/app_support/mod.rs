//! A target-app process for the bench's integration tests: started from a prepared
//! `Command`, its port read from its `listening on` line, killed on drop.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};

/// A running target-app; killed and reaped on drop.
pub struct App {
    /// The app (or `taskset`, which execs it: same pid).
    pub child: Child,
    /// The port it listens on (127.0.0.1).
    pub port: u16,
}

impl Drop for App {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl App {
    /// Spawns `cmd` (target-app with `PORT=0`, its database and costs already set) and waits
    /// for its `target-app: listening on http://127.0.0.1:PORT (...)` line on stderr. Panics
    /// when the app exits first. Stderr is drained afterwards so the app never blocks on it.
    pub fn start(mut cmd: Command) -> App {
        let mut child = cmd
            .env("JWT_SECRET", bench::DEFAULT_JWT_SECRET)
            .env("PORT", "0")
            .env("HOST", "127.0.0.1")
            .env("RUST_LOG", "error")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {cmd:?}: {e}"));
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        let port = loop {
            line.clear();
            let n = stderr.read_line(&mut line).unwrap();
            assert!(n > 0, "target-app exited before listening");
            if let Some(rest) = line.split("listening on http://").nth(1) {
                let addr = rest.split_whitespace().next().unwrap();
                break addr.rsplit(':').next().unwrap().parse::<u16>().unwrap();
            }
        };
        std::thread::spawn(move || {
            let mut sink = Vec::new();
            let _ = stderr.read_to_end(&mut sink);
        });
        App { child, port }
    }
}
