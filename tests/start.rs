//! End-to-end: the real `skein` binary starts on a temp data directory, recovers the
//! logs it finds, and stops cleanly on SIGTERM; bad flags get a clear error.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use skein_engine::io::dma::DmaStorage;
use skein_engine::{AppendMode, Batch, LeaderEpoch, LogConfig, LogManager, TopicPartition};

fn skein() -> Command {
    Command::new(env!("CARGO_BIN_EXE_skein"))
}

/// Writes `count` batches to partition `orders-0` under `dir`, then "crashes" (no close).
fn write_partition(dir: &std::path::Path, count: i32) {
    let dir = dir.to_owned();
    glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound).make().unwrap().run(async move {
        let manager = LogManager::new(DmaStorage, dir, 1 << 20);
        let log = manager.create(TopicPartition::new("orders", 0), LogConfig::default()).await.unwrap();
        for _ in 0..count {
            let batch = Batch::validate(skein_engine::batch::testing::batch(4, 100), usize::MAX).unwrap();
            log.append(batch, AppendMode::Leader { epoch: LeaderEpoch(0) }).await.unwrap();
        }
    });
}

// `skein start` recovers an unclean log, and SIGTERM closes it cleanly.
#[test]
fn start_recovers_and_stops_cleanly_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    write_partition(dir.path(), 25);
    let checkpoint = dir.path().join("orders-0/skein-checkpoint");
    assert!(std::fs::read_to_string(&checkpoint).unwrap().contains("clean_shutdown 0"));
    let mut child = skein()
        .args(["start", "--cores", "1", "--data-dir"])
        .arg(dir.path())
        .env("SKEIN_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Give it time to open the logs, then ask it to stop.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&checkpoint).unwrap_or_default().contains("recovery_point 100") {
        assert!(Instant::now() < deadline, "skein did not recover the log");
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: sending a signal to our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("skein did not stop on SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let output = child.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&output.stdout).to_string() + &String::from_utf8_lossy(&output.stderr);
    assert!(status.success(), "{log}");
    assert!(log.contains("stopped cleanly"), "{log}");
    assert!(std::fs::read_to_string(&checkpoint).unwrap().contains("clean_shutdown 1"));
}

// Invalid flags are refused with a message naming the setting and a non-zero exit.
#[test]
fn bad_flags_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for (args, expected) in [
        (vec!["--cores", "0"], "invalid --cores"),
        (vec!["--cores", "99999"], "invalid --cores"),
        (vec!["--cores", "banana"], "invalid --cores"),
        (vec!["--cache-mb-per-shard", "0"], "--cache-mb-per-shard"),
    ] {
        let output = skein().arg("start").args(&args).arg("--data-dir").arg(dir.path()).output().unwrap();
        assert!(!output.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}
