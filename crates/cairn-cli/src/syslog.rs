//! The background daemon's log goes to syslog(3) — journald on a systemd
//! host (`journalctl -t cairn`), `/var/log/syslog` under rsyslog — when
//! `cairn mount` was given no `--log FILE`: until then its messages
//! (errors, ENOSPC, replays, the unmount) went nowhere.
//!
//! Each event is formatted as plain text (no colour, no timestamp: syslog
//! adds its own) and sent as one datagram to `/dev/log` in the form
//! syslog(3) uses (`<PRI>cairn[PID]: message`, facility daemon, the
//! priority of the event's level). Where nothing listens on `/dev/log`, or
//! its queue is full, the message is dropped: logging never blocks the
//! daemon.

use std::io::Write;
use std::os::unix::net::UnixDatagram;
use tracing::{Level, Metadata};
use tracing_subscriber::fmt::MakeWriter;

/// Where syslog(3) sends.
const DEV_LOG: &str = "/dev/log";

/// Installs the tracing subscriber.
pub fn init(filter: tracing_subscriber::EnvFilter) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(Syslog)
        .with_target(false)
        .with_ansi(false)
        .without_time()
        .try_init();
}

/// Makes one [`Line`] per event, at the event's priority.
struct Syslog;

impl<'a> MakeWriter<'a> for Syslog {
    type Writer = Line;

    fn make_writer(&'a self) -> Line {
        Line { priority: libc::LOG_INFO, buf: Vec::new() }
    }

    fn make_writer_for(&'a self, meta: &Metadata<'_>) -> Line {
        let priority = match *meta.level() {
            Level::ERROR => libc::LOG_ERR,
            Level::WARN => libc::LOG_WARNING,
            Level::INFO => libc::LOG_INFO,
            _ => libc::LOG_DEBUG,
        };
        Line { priority, buf: Vec::new() }
    }
}

/// One formatted event, sent when dropped.
struct Line {
    priority: libc::c_int,
    buf: Vec<u8>,
}

impl Write for Line {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        let text = String::from_utf8_lossy(&self.buf);
        let text = text.trim_end();
        if text.is_empty() {
            return;
        }
        let msg = format!("<{}>cairn[{}]: {text}", libc::LOG_DAEMON | self.priority, std::process::id());
        // Never blocks: a listener that reads slowly (its queue holds ten
        // datagrams) loses messages rather than stopping the daemon.
        if let Ok(sock) = UnixDatagram::unbound() {
            if sock.set_nonblocking(true).is_ok() {
                let _ = sock.send_to(msg.as_bytes(), DEV_LOG);
            }
        }
    }
}
